"""DNSSEC for ToolDNS zones: keys on disk, online signing of replies, denial of existence.

:mod:`.keys` (one combined signing key per zone, in a key directory beside the zone files, files
checked for permissions), :mod:`.signer` (RRSIGs with dnspython's ``dns.dnssec``, cached),
:mod:`.manage` (keygen, DS written into parents' zone files, rollover steps: what ``tooldns
dnssec`` and ``tooldns build --sign`` run), :mod:`.verify` (a child's data checked against the DS
its parent holds: what a parent requires of a signed child's ``_summary.`` record). What a reply
to a DO query carries (RRSIGs, DS or an NSEC proving there is none in referrals, compact NSEC
denial) is decided in :mod:`tooldns.serving.signing`, above this package.
``docs/dnssec.md`` tells the whole story.

Needs ``cryptography`` (the ``dnssec`` extra): ``pip install 'tooldns[server,dnssec]'``.

    >>> from tooldns.dnssec import keygen_tree
    >>> keygen_tree("zones")        # a key for every zone without one; each child's DS into its parent
"""

import warnings

# cryptography deprecates DSA (from 51.0), and dnspython's DNSSEC algorithms name its DSA classes when
# they are imported: a warning on every command's stderr, whatever it does. ToolDNS makes Ed25519 and
# ECDSA P-256 keys only; the warning says nothing to its users.
warnings.filterwarnings("ignore", message="DSA is deprecated", module=r"dns\.dnssecalgs\.dsa")

