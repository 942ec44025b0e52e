"""Plan-title normalization: the title a request sentence names, not the sentence (F10).

A pure function (no I/O, no clock), so either side of the Temporal boundary may use it;
the plans toolset calls it on the activity side, before ``create_plan`` sends anything.

``normalize_plan_title`` applies these rules, in order:

1. Whitespace (including the ideographic space) is collapsed and trimmed.
2. Only a *request* is rewritten. A request starts with a polite prefix (``please``,
   ``can you``, ``I'd like to``, ``帮我``, ``请帮我``, ``麻烦你``, ``我想``, ...) or a create
   verb (``create``, ``make``, ``set up``, ``创建``, ``新建``, ``制定``, ``建一个``, ...),
   or is a bare ``title: X`` / ``标题是X``. Anything else is taken as a title already and
   keeps its words: ``Plan for next week``, ``请假制度梳理`` and ``Review "X" launch`` stay
   as they are (only enclosing quotes are removed).
3. In a request, the title is, by priority:
   a. what follows a naming marker (``called``, ``named``, ``titled``, ``with the title``,
      ``title is``, ``标题是/为``, ``名字是/叫``, ``名为``, ``叫做``, ``叫`` after 个/份/划);
   b. else the first quoted text (“…” 「…」 『…』 《…》 "…" '…');
   c. else what the create phrase is about: ``create a plan for X`` (→ X),
      ``make a X plan`` (→ X plan), ``创建一个X的计划`` (→ X), ``新建计划：X`` (→ X),
      ``做一个X计划`` (→ X计划).
   Quoted text wins over everything after it and is kept verbatim. Unquoted text stops
   at the end of its clause (``,`` ``;`` ``!`` ``?`` ``，`` ``。`` ...), loses a trailing
   time phrase (``for next week``, ``by Friday``, ``tomorrow``, ``下周五之前``, ``明天``),
   a leading ``下周的``-style phrase, and a trailing ``的计划``; ``the``/``a`` before the
   topic of ``a plan for ...`` goes too. A time phrase is never stripped down to nothing.
4. Wrapping quotes and trailing punctuation are removed from an extracted title.
5. Length is bounded to ``max_length`` characters: cut at a word boundary when there is
   one in the second half, else hard (CJK), and ``…`` appended.
6. Never empty: if nothing usable is named (``please create a plan``), the trimmed
   original is used, bounded the same way. An empty input raises ``ValueError``.

The caller keeps ``original`` (e.g. in the plan's description) when ``changed`` is true.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ELLIPSIS = "…"

_SPACES = re.compile(r"[\s\u3000]+")
_TRAILING_PUNCT = " \t.。．!！?？,，;；:：、~～-–—"
_LEADING_PUNCT = " \t:：,，-–—"

_QUOTE_PAIRS = {
    "“": "”",
    "「": "」",
    "『": "』",
    "《": "》",
    "【": "】",
    "‘": "’",
    '"': '"',
    "'": "'",
    "«": "»",
}
_QUOTED = re.compile(
    r"“(?P<a>[^”]+)”|「(?P<b>[^」]+)」|『(?P<c>[^』]+)』|《(?P<d>[^》]+)》|‘(?P<e>[^’]+)’"
    r'|"(?P<f>[^"]+)"|(?<!\w)\'(?P<g>[^\']+)\'(?!\w)|«(?P<h>[^»]+)»'
)

# --- request detection ---------------------------------------------------------------

_EN_POLITE = re.compile(
    r"^(?:(?:hey|hi|ok|okay)\b[,!]?\s*|please\s+|pls\s+|kindly\s+|"
    r"(?:can|could|would|will)\s+(?:you|u)\s+|(?:i|we)\s+(?:want|need|would\s+like|'d\s+like)"
    r"(?:\s+to)?\s+|i'd\s+like(?:\s+to)?\s+|let'?s\s+|let\s+us\s+|help\s+me\s+|"
    r"go\s+ahead\s+and\s+)",
    re.IGNORECASE,
)
_ZH_CREATE = r"(?:创建|新建|建立|创立|制定|添加|新增|起草|安排|建|做|加|写|开|弄|定)"
_ZH_POLITE = re.compile(
    r"^(?:请(?:你|您)?帮(?:我|忙)|麻烦(?:你|您)?(?:帮我)?|帮(?:我|忙)|给我|替我|"
    r"(?:我|我们)(?:想要|想|要|需要)|(?:你)?(?:能不能|能否|可以|能)|请(?:你|您)?(?="
    + _ZH_CREATE
    + r"))"
)
_EN_CREATE = re.compile(
    r"^(?:create|make|add|set\s*up|start|draft|open|build|put\s+together|write\s+up|new)\b",
    re.IGNORECASE,
)
_ZH_CREATE_START = re.compile(
    r"^(?:创建|新建|建立|创立|制定|添加|新增|起草|(?:建|做|加|写|开|弄|定|安排)(?:一下)?(?:一个|一份|一项|个|份))"
)
_BARE_TITLE = re.compile(
    r"^(?:(?:the\s+)?(?:title|name)\s*(?::|is\b)|标题(?:是|为|[:：])|名字(?:是|为|[:：])|名称(?:是|为|[:：]))",
    re.IGNORECASE,
)

# --- extraction ----------------------------------------------------------------------

_MARKER = re.compile(
    r"(?:\b(?:called|named|titled|entitled)\b|\bwith\s+(?:the\s+|a\s+)?(?:title|name)\b(?:\s+of\b)?"
    r"|\b(?:the\s+)?(?:title|name)\s+(?:is|should\s+be|will\s+be)\b|\b(?:title|name)\s*[:=]"
    r"|标题(?:是|为|叫做|叫|[:：])|题目(?:是|为|叫|[:：])|名字(?:是|为|叫做|叫|[:：])|名称(?:是|为|[:：])"
    r"|命名为|取名为|取名|名为|叫做|叫作|称为|(?<=[个份项划])叫)\s*[:：]?\s*",
    re.IGNORECASE,
)
_EN_ABOUT = re.compile(
    r"^(?:(?:create|make|add|set\s*up|start|draft|open|build|put\s+together|write\s+up)\s+)?"
    r"(?:me\s+|us\s+)?(?:(?:a|an|the|one|my|our)\s+)?(?:new\s+)?plan"
    r"(?:\s*[:\-–—]\s*|\s+(?:for|about|on|to|regarding|around)\s+)(?P<x>.+)$",
    re.IGNORECASE,
)
_EN_ADJECTIVE = re.compile(
    r"^(?:create|make|add|set\s*up|start|draft|open|build)\s+(?:me\s+)?(?:(?:a|an|the|my|our)\s+)?"
    r"(?P<x>.+?\s+plan)[.!?]*$",
    re.IGNORECASE,
)
_ZH_ABOUT = re.compile(
    r"^(?:请)?" + _ZH_CREATE + r"(?:一下)?(?:一个|一份|一项|个|份|项)?(?:新的?)?(?P<x>.*)$"
)
_ZH_PLAN_THEN_TITLE = re.compile(r"^(?:计划|规划)(?:[:：\s]+)(?P<x>.+)$")
_ZH_OF_PLAN = re.compile(r"^(?:关于)?(?P<x>.+)的(?:计划|规划)$")

_EN_CLAUSE_END = re.compile(r"[,;!?\n]|\.(?:\s|$)")
_ZH_CLAUSE_END = re.compile(r"[，。；！？、\n]")

_EN_TIME_WORD = (
    r"(?:week|weekend|month|year|today|tomorrow|tonight|monday|tuesday|wednesday|thursday"
    r"|friday|saturday|sunday|mon|tue|wed|thu|fri|sat|sun|eod|eow)"
)
_EN_TIME_TAIL = re.compile(
    r"\s+(?:(?:for|by|due|before|until|till|on|starting|from|in|within)\s+"
    r"(?:(?:the\s+)?(?:next|this|coming|end\s+of(?:\s+the)?|end\s+of\s+next)\s+)?"
    r"|(?:next|this|coming)\s+)" + _EN_TIME_WORD + r"\b\s*$"
    r"|\s+(?:today|tomorrow|tonight)\s*$",
    re.IGNORECASE,
)
_ZH_TIME = (
    r"(?:在)?(?:下下?周[一二三四五六日天末]?|本周[一二三四五六日天末]?|这周[一二三四五六日天末]?"
    r"|周[一二三四五六日天末]|下个?月(?:底|初)?|本月(?:底|初)?|这个月(?:底|初)?"
    r"|下季度|本季度|明天|今天|后天|今晚|明晚|明年|今年|月底|年底|月初)"
)
_ZH_TIME_TAIL = re.compile(_ZH_TIME + r"(?:之前|以前|前|内|完成|截止|到期)?$")
_ZH_TIME_HEAD = re.compile(r"^" + _ZH_TIME + r"(?:的)?")
_EN_ARTICLE = re.compile(r"^(?:the|a|an)\s+", re.IGNORECASE)


@dataclass(frozen=True)
class NormalizedTitle:
    title: str
    original: str
    changed: bool


def normalize_plan_title(title: str, *, max_length: int = 80) -> NormalizedTitle:
    """The title a plan should get from what the model passed (rules: module docstring)."""
    if max_length < 2:
        raise ValueError("max_length must be at least 2")
    text = _collapse(title)
    if not text:
        raise ValueError("a plan title is required")
    extracted = _extract(text)
    candidate = _strip_decoration(extracted) if extracted is not None else ""
    if not candidate:
        candidate = _unwrap_quotes(text) or text
    bounded = _bound(candidate, max_length)
    return NormalizedTitle(title=bounded, original=title, changed=bounded != title)


def _collapse(text: str) -> str:
    return _SPACES.sub(" ", text).strip()


def _unwrap_quotes(text: str) -> str:
    while len(text) >= 2 and _QUOTE_PAIRS.get(text[0]) == text[-1]:
        inner = text[1:-1].strip()
        if not inner or _QUOTE_PAIRS.get(text[0]) in inner:
            break
        text = inner
    return text


def _strip_decoration(text: str) -> str:
    text = _unwrap_quotes(text.strip(_TRAILING_PUNCT).lstrip(_LEADING_PUNCT))
    return _collapse(text.strip(_TRAILING_PUNCT).lstrip(_LEADING_PUNCT))


def _strip_polite(text: str) -> tuple[str, bool]:
    polite = False
    while True:
        match = _EN_POLITE.match(text) or _ZH_POLITE.match(text)
        if not match or not match.group(0):
            return text, polite
        text, polite = text[match.end() :].lstrip(" ,，"), True


def _is_request(body: str, polite: bool) -> bool:
    return bool(
        polite or _EN_CREATE.match(body) or _ZH_CREATE_START.match(body) or _BARE_TITLE.match(body)
    )


def _extract(text: str) -> str | None:
    """The named title in a request, ``text`` itself if it is not a request, or ``None``."""
    body, polite = _strip_polite(text)
    if not _is_request(body, polite):
        return _unwrap_quotes(text)

    marker = _MARKER.search(body)
    if marker:
        rest = body[marker.end() :]
        quoted = _QUOTED.match(rest)
        if quoted:
            return _quoted_text(quoted)
        return _tidy(_cut_clause(rest), zh_plan_suffix=True)

    quoted = _QUOTED.search(body)
    if quoted:
        return _quoted_text(quoted)

    clause = _cut_clause(body)
    about = _EN_ABOUT.match(clause) or _EN_ADJECTIVE.match(_tidy(clause))
    if about:
        topic = _EN_ARTICLE.sub("", _tidy(about.group("x")))
        return None if topic.lower() in ("", "plan", "new plan") else topic
    about = _ZH_ABOUT.match(clause)
    if about:
        topic = about.group("x").strip()
        then_title = _ZH_PLAN_THEN_TITLE.match(topic)
        if then_title:
            return _tidy(then_title.group("x"), zh_plan_suffix=True)
        if topic in ("", "计划", "规划", "plan"):
            return None
        return _tidy(topic, zh_plan_suffix=True)
    return None


def _quoted_text(match: re.Match[str]) -> str:
    return next(group for group in match.groups() if group is not None)


def _cut_clause(text: str) -> str:
    text = text.strip(_LEADING_PUNCT)
    ends = [m.start() for m in (_EN_CLAUSE_END.search(text), _ZH_CLAUSE_END.search(text)) if m]
    return text[: min(ends)] if ends else text


def _tidy(text: str, *, zh_plan_suffix: bool = False) -> str:
    """Drop time phrases (never down to nothing) and a trailing 的计划 from unquoted text."""
    text = text.strip(_TRAILING_PUNCT).strip()
    for pattern in (_EN_TIME_TAIL, _ZH_TIME_TAIL, _ZH_TIME_HEAD):
        shorter = pattern.sub("", text).strip(_TRAILING_PUNCT).strip()
        if shorter:
            text = shorter
    if zh_plan_suffix:
        of_plan = _ZH_OF_PLAN.match(text)
        if of_plan:
            topic = _ZH_TIME_HEAD.sub("", of_plan.group("x")).strip()
            text = topic or of_plan.group("x")
    return text


def _bound(text: str, max_length: int) -> str:
    if len(text) <= max_length:
        return text
    cut = text[: max_length - 1]
    space = cut.rfind(" ")
    if space >= max_length // 2:
        cut = cut[:space]
    return cut.rstrip(_TRAILING_PUNCT) + ELLIPSIS
