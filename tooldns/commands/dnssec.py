"""``tooldns dnssec ...``: the command-line shell over :mod:`tooldns.dnssec.manage` and :mod:`tooldns.dnssec.keys`.

    tooldns dnssec keygen zones/             a key for every zone without one; each child's DS into its parent
    tooldns dnssec keygen zones/ --zone hko.weather.tools. --algorithm p256 --no-ds
    tooldns dnssec show zones/               keys, their states, DS lines and the root's DNSKEY (the anchor)
    tooldns dnssec ds zones/ --zone hko.weather.tools. [--key TAG]   write the child's DS into its parent
    tooldns dnssec roll zones/ hko.weather.tools.        rollover step 1: a new key published beside the old
    tooldns dnssec retire zones/ hko.weather.tools. OLDTAG   rollover step 3: the old key retired

``tooldns dnssec show zones/ --anchor`` prints only the root zone's DNSKEY line, ready for
``tooldns-resolve --validate --anchor FILE``. ``tooldns build --sign`` runs ``keygen`` on the tree it
writes (:func:`add_build_flags`, :func:`sign_built`); ``tooldns serve`` takes ``--keys`` and
``--signature-validity`` (:func:`add_serve_flags`, :func:`signing_from_args`).
"""

from __future__ import annotations

import argparse

from ..dnssec.keys import ALGORITHMS, DEFAULT_ALGORITHM, load_keys
from ..dnssec.manage import key_dir, keygen_tree, retire, roll, write_ds
from ..exceptions import DNSSECError


def _keygen(args) -> int:
    report = keygen_tree(args.zonedir, args.keys, args.algorithm, args.zone, ds=args.ds)
    print(report.text())
    return 0


def _show(args) -> int:
    from ..zone.zonefile import load_zone, zone_files

    origins = sorted((load_zone(p).origin for p in zone_files(args.zonedir)), key=lambda o: (o.count("."), o))
    keys = key_dir(args.zonedir, args.keys)
    if args.anchor:
        root = load_keys(keys, origins[0])
        if not root:
            raise DNSSECError(f"{origins[0]} has no key in {keys}; run tooldns dnssec keygen {args.zonedir}")
        print("\n".join(k.dnskey_text() for k in root))
        return 0
    for origin in origins:
        found = load_keys(keys, origin, retired=True)
        if not found:
            print(f"{origin}: unsigned")
        for k in found:
            print(f"{origin}: key {k.key_tag} algorithm {k.algorithm} {k.state} (created {k.created})")
            print(f"  {origin} IN DS {k.ds_text()}")
            print(f"  {k.dnskey_text()}")
    return 0


def _ds(args) -> int:
    written = write_ds(args.zonedir, args.zone, tags=args.key, keydir=args.keys)
    print("\n".join(f"DS of {child} written into {path}" for child, path in written) or "no DS changed")
    return 0


def _roll(args) -> int:
    key = roll(args.zonedir, args.zone, args.algorithm, args.keys)
    print(f"{key.zone}: new key {key.key_tag} published beside the active one. Next, once the DNSKEY TTL has "
          f"passed: tooldns dnssec ds {args.zonedir} --zone {key.zone} --key {key.key_tag}")
    return 0


def _retire(args) -> int:
    left = retire(args.zonedir, args.zone, args.tag, args.keys)
    print(f"{args.zone}: key {args.tag} retired; signing with {', '.join(str(k.key_tag) for k in left)}")
    return 0


def add_dnssec_command(sub) -> None:
    """The ``dnssec`` subcommand and its own subcommands, on *sub* (``tooldns``'s subparsers)."""
    d = sub.add_parser("dnssec", help="DNSSEC keys: make them, show them, hand DS to parents, roll them over "
                                      "(docs/dnssec.md)")
    steps = d.add_subparsers(dest="dnssec_command", required=True)

    def common(p):
        p.add_argument("zonedir", help="the directory of zone files")
        p.add_argument("--keys", metavar="DIR", help="the key directory (default: ZONEDIR/keys)")
        return p

    algorithm = {"choices": list(ALGORITHMS), "default": DEFAULT_ALGORITHM,
                 "help": f"key algorithm (default {DEFAULT_ALGORITHM}: Ed25519, 15; p256: ECDSA P-256, 13)"}
    k = common(steps.add_parser("keygen", help="a key for every zone without one; each child's DS into its parent"))
    k.add_argument("--zone", action="append", metavar="ORIGIN", help="only this zone (repeatable)")
    k.add_argument("--algorithm", **algorithm)
    k.add_argument("--no-ds", dest="ds", action="store_false", help="write no DS into the parents' zone files")
    k.set_defaults(func=_keygen)
    s = common(steps.add_parser("show", help="keys, states, DS lines and DNSKEY lines"))
    s.add_argument("--anchor", action="store_true", help="print only the root zone's DNSKEY (a trust anchor file)")
    s.set_defaults(func=_show)
    w = common(steps.add_parser("ds", help="write children's DS into their parents' zone files"))
    w.add_argument("--zone", action="append", metavar="ORIGIN", help="only this child (repeatable)")
    w.add_argument("--key", action="append", type=int, metavar="TAG", help="the DS of this key only (repeatable; "
                                                                           "default: the active keys)")
    w.set_defaults(func=_ds)
    r = common(steps.add_parser("roll", help="rollover step 1: publish a new key beside the active one"))
    r.add_argument("zone", help="the zone's origin, e.g. weather.tools.")
    r.add_argument("--algorithm", **algorithm)
    r.set_defaults(func=_roll)
    t = common(steps.add_parser("retire", help="rollover step 3: retire a key; the published one becomes active"))
    t.add_argument("zone", help="the zone's origin, e.g. weather.tools.")
    t.add_argument("tag", type=int, help="the key tag of the key to retire ('tooldns dnssec show' lists them)")
    t.set_defaults(func=_retire)


def add_build_flags(b: argparse.ArgumentParser) -> None:
    """``build``'s DNSSEC flags: ``--sign`` makes keys for the tree it writes."""
    b.add_argument("--sign", "--dnssec", dest="sign", action="store_true",
                   help="DNSSEC: a key for every zone of the tree without one (in OUT/keys) and each child's DS "
                        "in its parent's zone file, as tooldns dnssec keygen OUT does (docs/dnssec.md)")
    b.add_argument("--sign-algorithm", choices=list(ALGORITHMS), default=DEFAULT_ALGORITHM,
                   help=f"key algorithm of --sign (default {DEFAULT_ALGORITHM})")


def sign_built(args) -> None:
    """After ``tooldns build --sign``: keys for the zones of ``args.out`` without one, DS into parents;
    one line said (a built tree may have thousands of zones)."""
    if not args.sign:
        return
    report = keygen_tree(args.out, algorithm=args.sign_algorithm)
    made = sorted({k.algorithm for k in report.made})
    algorithms = f" (algorithm {', '.join(map(str, made))})" if made else ""
    print(f"signed: {len(report.made)} new keys{algorithms}, {len(report.kept)} kept, in {key_dir(args.out)}; "
          f"the DS of {len(report.ds_written)} children written into their parents; the trust anchor: "
          f"tooldns dnssec show {args.out} --anchor")


def signing_from_args(args):
    """``tooldns serve``'s ``--keys`` and ``--signature-validity`` as a Signing (None: the defaults)."""
    from ..dnssec.signer import Signing

    if args.keys is None and args.signature_validity is None:
        return None
    if args.signature_validity is not None and not args.signature_validity > 0:
        raise ValueError(f"--signature-validity must be a number of days above 0, not {args.signature_validity:g}")
    validity = args.signature_validity * 86400 if args.signature_validity is not None else None
    return Signing(key_dir(args.zonedir, args.keys), **({"validity": validity} if validity else {}))


def add_serve_flags(s: argparse.ArgumentParser) -> None:
    """``serve``'s DNSSEC flags."""
    s.add_argument("--keys", metavar="DIR", help="DNSSEC key directory: zones with keys there are signed "
                                                "(default: ZONEDIR/keys when it exists; docs/dnssec.md)")
    s.add_argument("--signature-validity", type=float, metavar="DAYS",
                   help="days RRSIGs stay valid after they are made (default 14)")
