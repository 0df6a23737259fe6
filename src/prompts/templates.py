"""The prompt texts: system role, task definitions, reasoning types and answer formats.

The study's prompts share one structure (system role; task definition; reasoning-type
definition; output format; exemplars when inductive; the input), and the combined
strategies are built by concatenating the parts. The texts are kept short on purpose:
the embedded default model is a 135M model with an 8k context, and whole documents
(the ``len`` set) can take ~1,100 tokens on their own.
"""

from __future__ import annotations

import json

from src.study import REASONING_PARTS, TASK_LABELS, TASK_ORDER

from .answer_schema import REASONING_KEY, TEXT_KEY, answer_shape

#: How a task's targets are named inside the prompt text.
TARGET_NOUN = {
    "timex": "time expressions",
    "eventx": "event triggers",
    "comp": "time expressions and event triggers",
}

SYSTEM_ROLE = (
    "You are an expert annotator of temporal information in English text. "
    "You follow the TimeML guidelines, copy spans exactly as they are written, "
    "and reply with JSON only."
)

_TIMEX_DEFINITION = (
    'A time expression (TimeML TIMEX3) names a date ("June 5, 1998", "yesterday"), '
    'a time of day ("4 p.m.", "this morning"), a duration ("six months", '
    '"the past two years") or a set of times, i.e. a frequency ("every week", '
    '"twice a year"). Relative references such as "last week", "now" or '
    '"two days ago" count too. The creation date in a document header does not.'
)

_EVENT_DEFINITION = (
    "An event trigger (TimeML EVENT) is the word that expresses something that happens, "
    'occurs or holds: an action or occurrence ("fell", "merger"), a state '
    '("unemployed", "owns"), or a reporting or perception event ("said", '
    '"reported", "saw"). It is usually a single word: a verb, a nominalisation, '
    "an adjective or another predicative word."
)

TASK_DEFINITIONS = {
    "timex": "Task: extract every time expression in the text.\n" + _TIMEX_DEFINITION,
    "eventx": "Task: extract every event trigger in the text.\n" + _EVENT_DEFINITION,
    "comp": (
        "Task: extract every time expression and every event trigger in the text, "
        "jointly, keeping the two kinds apart.\n" + _TIMEX_DEFINITION + "\n" + _EVENT_DEFINITION
    ),
}

_TIMEX_RULES = (
    "A valid time expression span:\n"
    "- refers to a date, a time of day, a duration, a frequency or a relative time;\n"
    "- is one continuous piece of the text, copied character for character;\n"
    '- includes its determiners, numbers and modifiers ("the last three months", '
    '"early next year", "about 20 years");\n'
    '- keeps parts that name one time together ("Friday morning", "Oct. 3, 1998");\n'
    '- leaves out a preposition or conjunction in front of it ("in", "since", "until");\n'
    "- is not a bare number without a time meaning, and not part of a name."
)

_EVENT_RULES = (
    "A valid event trigger span:\n"
    "- is the head word only, copied character for character: no auxiliaries, modals, "
    'negation, articles or arguments ("has been sold" -> "sold", '
    '"the sale of assets" -> "sale");\n'
    '- for a copula with a predicate, is the predicate ("was unclear" -> "unclear");\n'
    "- is marked for every mention, also when the event is negated, planned, "
    "hypothetical or reported;\n"
    "- is never a time expression or a name of a person, place or organisation."
)

#: Deductive reasoning: an explicit definition of a valid span, applied without examples.
DEDUCTIVE = {
    "timex": "Deductive reasoning: apply this definition strictly to decide what to extract.\n" + _TIMEX_RULES,
    "eventx": "Deductive reasoning: apply this definition strictly to decide what to extract.\n" + _EVENT_RULES,
    "comp": "Deductive reasoning: apply these definitions strictly to decide what to extract.\n"
    + _TIMEX_RULES
    + "\n"
    + _EVENT_RULES,
}

#: Abductive reasoning: candidates, reasoning about them, the best non-overlapping choice.
ABDUCTIVE = (
    "Abductive reasoning: first list the candidate spans, i.e. every word or phrase that "
    "could be one of the {targets}. Then judge each candidate in its context: is it "
    "really a target, and are its boundaries complete? Finally select the explanation "
    "that fits the text best: the most complete spans, with no two spans overlapping "
    "(of two overlapping candidates keep the one that covers the whole target). "
    'Write these steps briefly in "reasoning_steps".'
)

#: Inductive reasoning: generalise span forms and boundaries from annotated examples.
INDUCTIVE = (
    "Inductive reasoning: learn from the annotated examples below which words and phrases count as "
    "{targets} and where their boundaries lie, then annotate the text in the same way."
)

_COPY_RULE = "copied exactly from the text, in order of appearance"

#: Answer formats, keyed by (task, abductive); these are the formats the parser reads.
OUTPUT_FORMATS = {
    ("timex", False): (
        "Output: a JSON array of the time expressions, " + _COPY_RULE + ", "
        'e.g. ["last week", "Friday"]. If there are none, output [].'
    ),
    ("eventx", False): (
        "Output: a JSON array of the event triggers, " + _COPY_RULE + ", "
        'e.g. ["said", "meeting"]. If there are none, output [].'
    ),
    ("comp", False): (
        'Output: one JSON object {"timex": [...], "eventx": [...]} with the time '
        'expressions under "timex" and the event triggers under "eventx", each list '
        + _COPY_RULE
        + ". Use [] for an empty list."
    ),
    ("timex", True): (
        'Output: one JSON object {"reasoning_steps": [...], "spans": [...]}: a few short '
        "reasoning steps, then the selected time expressions, " + _COPY_RULE + ". "
        'If there are none, "spans" is [].'
    ),
    ("eventx", True): (
        'Output: one JSON object {"reasoning_steps": [...], "spans": [...]}: a few short '
        "reasoning steps, then the selected event triggers, " + _COPY_RULE + ". "
        'If there are none, "spans" is [].'
    ),
    ("comp", True): (
        'Output: one JSON object {"reasoning_steps": [...], "timex": [...], '
        '"eventx": [...]}: a few short reasoning steps, then the selected time expressions '
        "and event triggers, each list " + _COPY_RULE + ". Use [] for an empty list."
    ),
}

EXAMPLES_HEADER = "Annotated examples:"
EXAMPLE_BLOCK = "Example {number}\nText: {text}\nOutput: {answer}"
INPUT_HEADER = "Now annotate this text.\nText: "

#: Reasoning steps shown in abductive exemplars (rendered from gold spans). Two steps, each at
#: most ``answer_schema.REASONING_MAX_CHARS`` long and without quotes: a small model copies the
#: exemplars' steps, and longer or quoted steps left it no token budget for the spans (and
#: every generated token of 520 answers per configuration costs time).
ABDUCTIVE_EXAMPLE_STEPS = {
    "candidates": "Candidates: {candidates}",
    "more": " ...",
    "no_candidates": "No candidates.",
    "none_kept": "Nothing to keep.",
    "select_one": "No overlap: keep it.",
    "select_many": "No overlap: keep all {count}.",
}

#: The reasoning parts' texts in prompt order, keyed by ``src.study.REASONING_PARTS`` names.
#: An entry is a per-task dict of texts or one text with a ``{targets}`` placeholder. A new
#: reasoning letter is one entry here (its position is its place in the prompt) plus one
#: ``REASONING_PARTS`` entry in ``src/study.py``.
REASONING_TEMPLATES: dict[str, dict[str, str] | str] = {
    "deductive": DEDUCTIVE,
    "abductive": ABDUCTIVE,
    "inductive": INDUCTIVE,
}
if set(REASONING_TEMPLATES) != {part.name for part in REASONING_PARTS}:  # a part without a text would vanish
    raise ValueError(
        f"REASONING_TEMPLATES {sorted(REASONING_TEMPLATES)} must name exactly the reasoning parts of "
        f"src.study.REASONING_PARTS {sorted(part.name for part in REASONING_PARTS)}"
    )


def reasoning_text(part: str, task: str) -> str:
    """The prompt text of one reasoning part for a task."""
    template = REASONING_TEMPLATES[part]
    if isinstance(template, dict):
        return template[task]
    return template.format(targets=TARGET_NOUN[task])


# ----- the study's answer formats -----------------------------------------------------------------

#: How one label's spans are named inside the prompt text.
LABEL_NOUN = {"TIMEX": "time expressions", "EVENT": "event triggers"}

_STUDY_LIST_RULE = "copied exactly from the text, each listed once, in order of appearance"

#: The one structured example that abductive prompts in the study format carry: a sentence
#: written for this project, its spans per label, and its reasoning per task.
STUDY_EXAMPLE_TEXT = "The museum reopened on Saturday after a two-year renovation, officials said."
STUDY_EXAMPLE_SPANS = {
    "TIMEX": ["Saturday", "two-year"],
    "EVENT": ["reopened", "renovation", "said"],
}
STUDY_EXAMPLE_STEPS = {
    "timex": [
        'Candidates: "Saturday", "after", "two-year".',
        '"after" only relates two times; "Saturday" is a date and "two-year" a duration.',
        'No two candidates overlap: keep "Saturday" and "two-year".',
    ],
    "eventx": [
        'Candidates: "museum", "reopened", "renovation", "said".',
        '"museum" is a thing; the others happen: an action, an occurrence, a report.',
        'No two candidates overlap: keep "reopened", "renovation" and "said".',
    ],
    "comp": [
        'Time candidates: "Saturday", "two-year"; event candidates: "reopened", "renovation", "said".',
        "Each time candidate is a whole time expression, each event candidate a head word.",
        "No two candidates overlap: keep all five under their kind.",
    ],
}


def study_example_answer(task: str) -> list[dict]:
    """The study-format abductive answer for :data:`STUDY_EXAMPLE_TEXT`."""
    shape = answer_shape(task, True, "study")
    labels = shape.span_keys
    answer: dict = {}
    for key in shape.keys:
        if key == TEXT_KEY:
            answer[key] = STUDY_EXAMPLE_TEXT
        elif key == REASONING_KEY:
            answer[key] = STUDY_EXAMPLE_STEPS[task]
        else:
            answer[key] = STUDY_EXAMPLE_SPANS[labels[key]]
    return [answer]


def _quoted_keys(keys: list[str]) -> str:
    return ", ".join(f'"{key}": [...]' for key in keys)


def _study_output_format(task: str, abductive: bool, cue: str = "Output:") -> str:
    shape = answer_shape(task, abductive, "study")
    span_keys = shape.span_keys
    described = " and ".join(f'the {LABEL_NOUN[label]} under "{key}"' for key, label in span_keys.items())
    if shape.container == "array":
        return (
            f"Output: a JSON array of strings: the {TARGET_NOUN[task]}, {_STUDY_LIST_RULE}, "
            "e.g. "
            + ('["last week", "Friday"]' if TASK_LABELS[task] == ("TIMEX",) else '["said", "meeting"]')
            + ". If there are none, output []."
        )
    if shape.container == "object":
        return (
            "Output: one JSON object {"
            + _quoted_keys(list(span_keys))
            + "} with "
            + described
            + f", each a list of strings {_STUDY_LIST_RULE}. Use [] for an empty list."
        )
    example = json.dumps(study_example_answer(task), ensure_ascii=False)
    return (
        'Output: a JSON list with one object for the text, [{"text": "...", '
        + _quoted_keys(list(span_keys))
        + ', "reasoning_steps": [...]}]: "text" repeats the input text, '
        + described
        + f', each a list of strings {_STUDY_LIST_RULE}, and "reasoning_steps" holds '
        "your reasoning steps as short strings. Use [] for an empty list. "
        f"An example of the format:\nText: {STUDY_EXAMPLE_TEXT}\n{cue} {example}"
    )


#: The study's answer formats, keyed by (task, abductive).
STUDY_OUTPUT_FORMATS = {
    (task, abductive): _study_output_format(task, abductive) for task in TASK_ORDER for abductive in (False, True)
}

#: Both format sets, keyed by answer format then (task, abductive).
OUTPUT_FORMAT_SETS = {"compact": OUTPUT_FORMATS, "study": STUDY_OUTPUT_FORMATS}


# ----- the completion prompt form -----------------------------------------------------------------

#: The answer line of a single-label completion prompt: ``Time expressions: [...]``.
COMPLETION_LABELS = {"TIMEX": "Time expressions", "EVENT": "Events"}
#: The answer line of a structured (abductive or comp) completion answer: one JSON object.
COMPLETION_ABDUCTIVE_CUE = "Reasoning steps and {targets} (JSON):"
COMPLETION_OBJECT_CUE = "{Targets} (JSON):"


def completion_cue(task: str, abductive: bool) -> str:
    """The line the completion prompt leaves open (the model writes the answer after it)."""
    if abductive:
        return COMPLETION_ABDUCTIVE_CUE.format(targets=TARGET_NOUN[task])
    if len(TASK_LABELS[task]) > 1:
        return COMPLETION_OBJECT_CUE.format(Targets=TARGET_NOUN[task].capitalize())
    return COMPLETION_LABELS[TASK_LABELS[task][0]] + ":"


def completion_output_format(task: str, abductive: bool, answer_format: str) -> str:
    """The output-format part of a completion prompt: the format's JSON answer (the study's
    abductive example is shown after the abductive cue)."""
    if abductive and answer_format == "study":
        return _study_output_format(task, True, cue=completion_cue(task, True))
    return OUTPUT_FORMAT_SETS[answer_format][(task, abductive)]
