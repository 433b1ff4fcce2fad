"""How much retrieved text goes before a question: config.toml's [documents] table.

Passages are taken best BM25 score first while these limits hold: each one scores at least
`relevance` times the best one's score (so a question one passage answers gets that passage, not
five weak ones beside it), at most `passages` of them, at most `tokens` estimated tokens, and at
most what this machine reads in `wait` seconds at the prefill speed measured on its earlier
replies with the model (no such limit before one is measured). Every retrieved token is read
before the first answer token. The context then cuts what does not fit beside the chat
(fit_sources). docs/documents.md gives the measurement behind the defaults.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import ClassVar

from samchat.errors import SamchatError

# Chosen by measurement over samchat/bench/data/doc_questions.jsonl: every question's answering
# document stays in with far fewer passages than no cut (docs/benchmarks.md).
DOCS_RELEVANCE = 0.5
DOCS_TOP = 6  # passages retrieved per question, at most
DOCS_BUDGET = 1200  # their estimated tokens, at most (fitting then counts exactly)
# Seconds of reading them, at the measured prefill speed: every labelled question keeps all its
# answering passages, and a question that matches six weak ones starts sooner (benchmarks.md).
DOCS_WAIT = 6.0


@dataclass(frozen=True)
class RetrievalRule:
    SECTION: ClassVar[str] = "documents"

    relevance: float = DOCS_RELEVANCE  # 0 keeps every passage the other limits allow
    passages: int = DOCS_TOP
    tokens: int = DOCS_BUDGET
    wait: float = DOCS_WAIT  # 0: no limit by time

    def token_limit(self, prefill_tps: float | None) -> int:
        """The tokens retrieval may add: `tokens`, or fewer where `wait` seconds at the
        measured prefill speed (tokens per second) read fewer."""
        if self.wait > 0 and prefill_tps:
            return max(1, min(self.tokens, int(self.wait * prefill_tps)))
        return self.tokens

    def to_mapping(self) -> dict[str, float]:
        return asdict(self)

    @classmethod
    def from_mapping(cls, table: object, where: str = "config") -> RetrievalRule:
        """From a TOML table; one-line SamchatError naming the bad key and what it takes."""
        if not isinstance(table, dict):
            raise SamchatError(f"{where}: [{cls.SECTION}] must be a table")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(table) - known)
        if unknown:
            raise SamchatError(
                f"{where}: [{cls.SECTION}] has no key {unknown[0]!r}; "
                f"the keys are {', '.join(sorted(known))}"
            )
        relevance = table.get("relevance", DOCS_RELEVANCE)
        if isinstance(relevance, bool) or not isinstance(relevance, int | float):
            raise SamchatError(f"{where}: [{cls.SECTION}] relevance must be a number from 0 to 1")
        if not 0.0 <= float(relevance) <= 1.0:
            raise SamchatError(
                f"{where}: [{cls.SECTION}] relevance must be from 0 to 1, not {relevance}"
            )
        wait = table.get("wait", DOCS_WAIT)
        if isinstance(wait, bool) or not isinstance(wait, int | float) or wait < 0:
            raise SamchatError(
                f"{where}: [{cls.SECTION}] wait must be a number of seconds, 0 or more "
                f"(0: no limit), not {wait!r}"
            )
        counts = {}
        for key, default in (("passages", DOCS_TOP), ("tokens", DOCS_BUDGET)):
            value = table.get(key, default)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SamchatError(
                    f"{where}: [{cls.SECTION}] {key} must be a whole number of 1 or more, "
                    f"not {value!r}"
                )
            counts[key] = value
        return cls(float(relevance), counts["passages"], counts["tokens"], float(wait))
