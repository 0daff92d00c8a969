"""The LoCoMo harness behind ``benchmarks/locomo.py``: Kioku's memory on a public benchmark.

dataset    LoCoMo's JSON layout, read and checked (one-line errors)
scoring    LoCoMo's normalized, stemmed token F1 per question category
posting    members' messages at the dataset's dates, and deletes, on dpytest
snapshot   the database copied after ingesting and put back before each question
kioku      the ``kioku`` system: the real bot, ingesting and asked in the channel
baselines  ``raw`` (last 25 messages), ``full`` (all that fits), ``none``
proxy      the recording proxy every model call goes through (calls, tokens, usage)
oracle     the scripted run's answerer: right exactly when the evidence is in the prompt
judge      the optional LLM judge on a second endpoint
report     per-system figures as JSON and a markdown table
progress   the progress bar on stderr
run        one run: systems ingest, then answer, then the judge
"""

from benchmarks.recall.dataset import CATEGORIES, DatasetError, Sample, load_dataset
from benchmarks.recall.oracle import EvidenceOracle
from benchmarks.recall.report import markdown
from benchmarks.recall.run import ASK_SUFFIX, SYSTEMS, Options, plan, run_benchmark
from benchmarks.recall.scoring import multi_hop_f1, normalize, score, token_f1

__all__ = [
    "ASK_SUFFIX",
    "CATEGORIES",
    "SYSTEMS",
    "DatasetError",
    "EvidenceOracle",
    "Options",
    "Sample",
    "load_dataset",
    "markdown",
    "multi_hop_f1",
    "normalize",
    "plan",
    "run_benchmark",
    "score",
    "token_f1",
]
