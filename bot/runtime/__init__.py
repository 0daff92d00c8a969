"""What keeps a process running and observable.

tasks         TaskRegistry: every background task, started and stopped in one place
metrics       Prometheus metrics and their /metrics server
health        /healthz: database, Discord and spool, as one answer
singleflight  one database read per missing key; keyed locks and queues
batching      many callers' single-key loads gathered into a few loads of many keys
"""

from bot.runtime.batching import BatchLoader
from bot.runtime.health import NOT_CONNECTED_YET, Health
from bot.runtime.metrics import Metrics, MetricsServer, TurnOutcome
from bot.runtime.singleflight import KeyedLocks, KeyedQueues, SingleFlight, finish_or_cancel
from bot.runtime.tasks import TaskRegistry

__all__ = [
    "NOT_CONNECTED_YET",
    "BatchLoader",
    "Health",
    "KeyedLocks",
    "KeyedQueues",
    "Metrics",
    "MetricsServer",
    "SingleFlight",
    "TaskRegistry",
    "TurnOutcome",
    "finish_or_cancel",
]
