"""A query's EDNS options as the server reads them, on either path: one of each, decoded, or an
:class:`~tooldns.exceptions.IntentError` saying what is wrong (the client's FORMERR).

The full path (:mod:`tooldns.serving.resolver`) reads them from dnslib's OPT record, the fast path
(:mod:`tooldns.serving.fast`) from the datagram's bytes; both decode them here, so that an option is
taken or refused alike, with the same text.

    >>> intent = decoded(option_data(opt, INTENT_OPTION_CODE), INTENT_OPTION_CODE, decode_intent, "intent")
    >>> intent = with_flags(intent, partial(option_data, opt))
"""

from __future__ import annotations

from dataclasses import replace

from ..exceptions import IntentError
from ..protocol.brief import BRIEF_OPTION_CODE, decode_brief
from ..protocol.fit import FIT_OPTION_CODE, decode_fit
from ..protocol.intent import Intent
from ..protocol.page import PAGE_OPTION_CODE, decode_page


def option_data(opt, code: int) -> list[bytes]:
    """The data of every option *code* of a query's OPT record (dnslib's), in order."""
    return [o.data for o in opt.rdata if o.code == code] if opt is not None else []


def decoded(datas: list[bytes], code: int, decode, what: str):
    """The one option *code* among *datas* decoded, None without one; IntentError for two or a bad one."""
    if len(datas) > 1:
        raise IntentError(f"{what} option {code} appears {len(datas)} times; send one")
    if not datas:
        return None
    try:
        return decode(datas[0])
    except IntentError as exc:  # VectorError is one too
        raise IntentError(f"bad {what} option: {exc}") from exc


#: the options :func:`with_flags` reads: a query with none of them keeps its intent as decoded
FLAG_OPTION_CODES = (BRIEF_OPTION_CODE, FIT_OPTION_CODE, PAGE_OPTION_CODE)


def with_flags(intent: Intent, datas_of) -> Intent:
    """*intent* with what the query's brief, fit and page options ask (*datas_of*: code -> the data
    of each option of that code); IntentError for a malformed one."""
    brief = decoded(datas_of(BRIEF_OPTION_CODE), BRIEF_OPTION_CODE, decode_brief, "brief")
    fit = decoded(datas_of(FIT_OPTION_CODE), FIT_OPTION_CODE, decode_fit, "fit")
    skip = decoded(datas_of(PAGE_OPTION_CODE), PAGE_OPTION_CODE, decode_page, "page")
    return replace(intent, brief=bool(brief), fit=bool(fit), skip=skip or 0) if brief or fit or skip else intent
