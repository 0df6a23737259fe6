"""Configuration read once, at the edge: where ``conf/`` is (:mod:`~src.core.locate`), the typed
configuration entry points build from Hydra's composition, its checks and errors, and the
``params.yaml`` resolvers Hydra's files use (:mod:`~src.core.params`)."""
