"""Documents into the model's context: BM25 retrieval over the imported passages, attached
files and piped text, fitted into the context and written into the user's message.

Every front end (`samchat ask`, the TUI, the benchmark) builds the message here, so what the
model sees, what the user sees and what the chat saves are the same text.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from samchat.corpus.readers import Skip, read_file
from samchat.corpus.rule import RetrievalRule
from samchat.errors import SamchatError
from samchat.figures import SourceRef
from samchat.messages import Message
from samchat.passages import estimate_tokens
from samchat.store import Store

if TYPE_CHECKING:
    from samchat.decoding.session import ChatSession

ATTACH_MAX_BYTES = 2 * 1024 * 1024  # an attached file's size limit
MIN_CUT_TOKENS = 24  # a source cut shorter than this is left out instead
_SAFETY_TOKENS = 8  # tokenization at the joins between sources differs by a token or two
_MAX_TERMS = 32
_COMMON_MIN = 32  # a term in this many passages is never too common to search for

SOURCES_HEAD = "Use these sources to answer."
QUESTION_HEAD = "Question: "
CUT_MARK = " […]"

# Words too common to tell passages apart (BM25 would weigh them low, but they make the
# OR-query touch most rows, which is what costs time on a large corpus).
_STOPWORDS = frozenset(
    re.findall(
        r"\w+",
        """a about above after again all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had
    has have having he her here hers him his how i if in into is it its itself just me more most
    my no nor not now of off on once only or other our out over own same she should so some
    such than that the their them then there these they this those through to too under until
    up very was we were what when where which while who whom why will with would you your
    please tell explain describe say give show summarize summarise quote answer question""",
    )
)
_WORD = re.compile(r"\w+")


class DocumentError(SamchatError):
    """A document cannot be used as a source: missing, binary, too large, or no corpus."""


@dataclass(frozen=True)
class Source:
    """One piece of text put before the question: a retrieved passage, a file or stdin."""

    title: str
    path: str | None  # the file (or URL) it came from; None for stdin
    text: str
    passage_id: int | None = None  # set for retrieved passages
    document_id: int | None = None
    heading: str = ""

    @property
    def label(self) -> str:
        heading = self.heading.removeprefix(self.title).removeprefix(" › ")
        name = self.title + (f" › {heading}" if heading else "")
        return f"{name} ({self.path})" if self.path and self.path != self.title else name

    def ref(self) -> SourceRef:
        """What a saved reply and `ask --json` keep of it."""
        return SourceRef(self.title, self.path, self.passage_id, self.document_id)


@dataclass
class Fitted:
    content: str  # the user message: the sources, then the question
    sources: list[Source]  # the ones that went in (cut ones hold the cut text)
    notices: list[str] = field(default_factory=list)  # one line per cut or left-out source


def query_terms(question: str) -> list[str]:
    words = [w.lower() for w in _WORD.findall(question)]
    terms = [w for w in dict.fromkeys(words) if w not in _STOPWORDS and (len(w) > 1 or w.isdigit())]
    return terms[:_MAX_TERMS]


def _telling_terms(store: Store, terms: list[str], total: int) -> list[str]:
    """The terms without those in more than a quarter of all passages: their BM25 weight is
    near nothing, yet scoring every passage they touch is what makes a large corpus slow. If
    every term is that common, the two rarest."""
    frequency = {t: store.passage_frequency(t) for t in terms}
    present = [t for t in terms if frequency[t]]
    telling = [t for t in present if frequency[t] <= max(_COMMON_MIN, total // 4)]
    return telling or sorted(present, key=frequency.__getitem__)[:2]


def retrieve(
    store: Store,
    question: str,
    rule: RetrievalRule | None = None,
    prefill_tps: float | None = None,
) -> list[Source]:
    """The best passages for `question` by `rule` (rule.py: relevance to the best, count,
    estimated tokens and the seconds reading them takes at `prefill_tps`, the model's measured
    prefill speed), duplicates (the same text imported twice, say a license in two packages)
    kept once. Raises DocumentError when nothing is imported."""
    rule = rule or RetrievalRule()
    limit = rule.token_limit(prefill_tps)
    total = store.passage_count()
    if total == 0:
        raise DocumentError(
            "there are no imported documents to search; run `samchat import PATH` first"
        )
    terms = _telling_terms(store, query_terms(question), total)
    relevant: list[Source] = []
    seen: set[str] = set()
    best = 0.0
    for hit in store.search_passages(terms, limit=rule.passages * 3):
        score = -hit.rank  # FTS5's bm25() is lower for better matches
        best = best or score
        if score < rule.relevance * best:
            break  # best first: the rest score lower still
        key = hashlib.sha1(" ".join(hit.text.split()).lower().encode()).hexdigest()
        if key in seen:
            continue
        seen.add(key)
        relevant.append(
            Source(hit.title, hit.source, hit.text, hit.id, hit.document_id, hit.heading)
        )
    return within(relevant, limit, rule.passages)


def within(found: list[Source], limit: int, most: int | None = None) -> list[Source]:
    """Passages (best first) that fit in about `limit` estimated tokens, at most `most` of them;
    one too long is passed over for the next, and the best one always stays. retrieve() cuts
    by it, and `ask` again once the model, and its measured prefill speed, is known."""
    out: list[Source] = []
    used = 0
    for source in found:
        if most is not None and len(out) >= most:
            break
        size = estimate_tokens(source.text)
        if out and used + size > limit:
            continue
        used += size
        out.append(source)
    return out


def read_attachment(path: Path, max_bytes: int = ATTACH_MAX_BYTES) -> Source:
    """A file as a source, read as `samchat import` reads it; DocumentError if it cannot be."""
    if not path.exists():
        raise DocumentError(f"cannot attach {path}: no such file; check the path")
    if path.is_dir():
        raise DocumentError(f"cannot attach {path}: it is a directory; attach files, or import it")
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise DocumentError(f"cannot attach {path}: {exc.strerror}") from None
    if size > max_bytes:
        raise DocumentError(
            f"cannot attach {path}: {size / 2**20:.1f} MB is over the {max_bytes / 2**20:.0f} MB "
            "limit for attachments; import it (`samchat import`) and ask with --docs"
        )
    try:
        doc = read_file(path, max_bytes)
    except Skip as why:
        raise DocumentError(f"cannot attach {path}: {why}") from None
    return Source(doc.title, str(path), doc.text)


def text_source(text: str, title: str = "stdin") -> Source:
    return Source(title, None, text)


def compose(question: str, sources: Sequence[Source]) -> str:
    """The user message: the sources, numbered, then the question. Without sources, the
    question as it is."""
    if not sources:
        return question
    body = "\n\n".join(f"[{i}] {s.label}\n{s.text.strip()}" for i, s in enumerate(sources, 1))
    return f"{SOURCES_HEAD}\n\n{body}\n\n{QUESTION_HEAD}{question}"


def split_content(content: str) -> tuple[str, str | None]:
    """(question, sources block) of a message `compose` wrote; (content, None) otherwise."""
    if not content.startswith(SOURCES_HEAD + "\n\n"):
        return content, None
    block, sep, question = content.rpartition("\n\n" + QUESTION_HEAD)
    if not sep:
        return content, None
    return question, block[len(SOURCES_HEAD) + 2 :]


def _cut(source: Source, tokens: int, count: Callable[[str], int]) -> Source:
    """The source's text cut (at a word) to at most `tokens` tokens."""
    text = source.text
    lo, hi = 0, len(text)
    while lo < hi:  # the longest prefix that fits
        mid = (lo + hi + 1) // 2
        if count(text[:mid] + CUT_MARK) <= tokens:
            lo = mid
        else:
            hi = mid - 1
    head = text[:lo]
    space = head.rfind(" ")
    if space > lo // 2:
        head = head[:space]
    return replace(source, text=head.rstrip() + CUT_MARK)


def fit(
    question: str,
    sources: Sequence[Source],
    *,
    prompt_tokens: Callable[[str], int],
    count: Callable[[str], int],
    limit: int,
) -> Fitted:
    """Put as many sources as fit before the question. `prompt_tokens(content)` is the whole
    prompt's length with `content` as the user message (the model's chat template around the
    conversation); `limit` the tokens it may take (the context less the reply's room). A source
    that does not fit is cut, and the ones after it left out, each with a one-line notice."""
    budget = limit - prompt_tokens(compose(question, [])) - _SAFETY_TOKENS
    budget -= count(f"{SOURCES_HEAD}\n\n\n\n{QUESTION_HEAD}")
    kept: list[Source] = []
    notices: list[str] = []
    left_out: list[Source] = []
    for i, source in enumerate(sources, 1):
        if left_out:
            left_out.append(source)
            continue
        need = count(f"[{i}] {source.label}\n{source.text.strip()}\n\n")
        if need <= budget:
            kept.append(source)
            budget -= need
            continue
        room = budget - count(f"[{i}] {source.label}\n\n\n")
        if room >= MIN_CUT_TOKENS:
            kept.append(_cut(source, room, count))
            total = count(source.text)
            notices.append(
                f"cut {source.label} to about {room:,} of its {total:,} tokens "
                "to fit the model's context"
            )
            budget = 0
        else:
            left_out.append(source)
    if left_out:
        names = ", ".join(s.label for s in left_out[:3]) + (", …" if len(left_out) > 3 else "")
        notices.append(
            f"left out {len(left_out)} source{'s' * (len(left_out) != 1)} that did not fit "
            f"the model's context: {names}"
        )
    content = compose(question, kept)
    while kept and prompt_tokens(content) > limit:  # the estimate was short: trim the last one
        last = kept[-1]
        shorter = _cut(last, max(count(last.text) - 2 * _SAFETY_TOKENS, 0), count)
        if count(shorter.text) < MIN_CUT_TOKENS:
            kept.pop()
            notices.append(f"left out {last.label}: it did not fit the model's context")
        else:
            kept[-1] = shorter
            if not last.text.endswith(CUT_MARK):
                notices.append(f"cut {last.label} to fit the model's context")
        content = compose(question, kept)
    return Fitted(content, kept, notices)


def fit_to_session(
    session: ChatSession,
    history: list[Message],
    question: str,
    sources: Sequence[Source],
    max_new_tokens: int,
) -> Fitted:
    """`fit` for a samchat.decoding.ChatSession: counted with its model's tokenizer and chat
    template, after `history` (the messages before the question), leaving the reply its room."""
    reserve = min(session.config.reserve_tokens, max_new_tokens)
    tokenizer = session.lm.tokenizer

    def prompt_tokens(content: str) -> int:
        return len(session.render([*history, {"role": "user", "content": content}]))

    def count(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    return fit(
        question,
        sources,
        prompt_tokens=prompt_tokens,
        count=count,
        limit=session.context_limit - reserve,
    )
