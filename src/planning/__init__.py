"""What a study will need before it is paid for: the profile's request and cost plan
(:mod:`~src.planning.profile`) and the instances a difference needs (:mod:`~src.planning.power`),
both printed by ``python -m src.plan``. Above the stages it plans, so nothing below imports it."""
