"""Celery queue names: the only place they are spelled."""

from enum import StrEnum


class Queue(StrEnum):
    DEFAULT = "default"
    INGEST = "ingest"
    EVAL = "eval"
    TRAIN = "train"
