"""Server-side exception hierarchy: every error ToolDNS's server side raises derives from one root.

    ToolDNSError
    ├── IntentError        the EDNS0 intent option is malformed (answered with FORMERR + EDE)
    │   └── VectorError    the EDNS0 intent vector option is malformed (answered the same way)
    ├── NameError_         a DNS name or cursor name breaks RFC 1035 or the cursor grammar
    ├── ZoneFileError      a zone file is invalid; carries every `file:line: message`
    ├── ScorerError        a scorer cannot be built or used (unknown name, bad options)
    ├── EmbeddingError     an embedder cannot be built or used (unknown spec, missing package or
    │                      weights, the embedding endpoint failed)
    ├── BuildError         a tool catalog cannot be turned into a zone tree
    ├── SummaryError       a child's published summary is malformed, too large or not its own
    ├── PlanError          a walk a zone publishes (``_walk.<origin>``) is malformed or out of range
    ├── DNSSECError        a zone's signing keys cannot be made, read or trusted (a private key
    │                      others may read, a key file that is not one)
    └── ServeError         the zones cannot be served here: too few open files allowed, or a
                           worker process cannot start (an OSError too)

Each class's docstring is its default message, as in dnspython.
"""

from __future__ import annotations


class ToolDNSError(Exception):
    """A ToolDNS error occurred."""

    def __init__(self, *args: object) -> None:
        if not args:
            args = (self.__doc__.strip(),)  # type: ignore[union-attr]
        super().__init__(*args)


class IntentError(ToolDNSError):
    """The intent option is malformed."""


class VectorError(IntentError):
    """The vector option is malformed."""


class NameError_(ToolDNSError):  # noqa: N801 - trailing underscore avoids shadowing the builtin
    """The name is not a valid DNS or cursor name."""


class ZoneFileError(ToolDNSError):
    """The zone file is invalid."""

    def __init__(self, errors: list[str] | str) -> None:
        self.errors = [errors] if isinstance(errors, str) else list(errors)
        super().__init__("\n".join(self.errors))


class ScorerError(ToolDNSError):
    """The scorer cannot be built."""


class EmbeddingError(ToolDNSError):
    """The texts cannot be embedded."""


class BuildError(ToolDNSError):
    """The catalog cannot be built into a zone tree."""


class SummaryError(ToolDNSError):
    """The published summary is not acceptable."""


class PlanError(ToolDNSError):
    """The published walk is malformed."""


class ServeError(ToolDNSError, OSError):
    """The zones cannot be served."""


class DNSSECError(ToolDNSError):
    """The zone's DNSSEC keys cannot be used."""
