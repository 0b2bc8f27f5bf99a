"""iptables rules owned by one daemon, read and changed in batches.

Every rule svc adds carries the comment ``svc:<owner>:<scope>:<key>``: ``owner`` is the
daemon's tag (stable for a ``--root``), ``scope`` says what the rule belongs to
(``net-<network id>`` for a bridge network's NAT, forwarding and part of the isolation,
``iso`` for the jump to the isolation chains, ``ports-<container>`` for a container's
published ports) and ``key`` is a hash of the rule itself. So the daemon recognises exactly
its own rules in ``iptables-save``'s output, whatever another program (or another svcd) has
there:

- a change is one ``iptables-restore --noflush`` that removes and adds just the difference,
  whatever the number of networks (dockerd of this generation, and svc before, ran iptables
  once or twice per rule, and isolation made that quadratic). After a full read
  (``reconcile``) the daemon knows its own rules, so a change needs no ``iptables-save``; if a
  removal finds its rule gone (someone else deleted it), the restore fails as a whole and the
  change is made again from a fresh read;
- a start reconciles: rules a crash left (of a network whose create was cut off, of a
  container's ports) go, missing ones come back.

Isolation between networks is dockerd's two-stage scheme, linear in the networks: FORWARD
jumps to ``SVC-ISO1-<owner>``, which sends what leaves one of our bridges for another
interface to ``SVC-ISO2-<owner>``, which drops it when that interface is one of our bridges.

Blocking (it runs iptables); the engine calls it from worker threads. Changes are serialised
by a lock: two read-modify-write cycles must not interleave.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field


class FirewallError(Exception):
    """iptables refused a change; the message has its words."""


@dataclass(frozen=True)
class Rule:
    table: str  # "filter" or "nat"
    chain: str
    spec: tuple[str, ...]
    first: bool = False  # inserted at the top of its chain (drops and jumps before accepts)

    def key(self) -> str:
        text = " ".join((self.table, self.chain, *self.spec))
        return hashlib.sha256(text.encode()).hexdigest()[:12]


def owner_of(daemon_id: str) -> str:
    """A daemon's short owner tag (10 hex digits) from its stable id."""
    return hashlib.sha256(daemon_id.encode()).hexdigest()[:10]


def rule(table: str, chain: str, *spec: str, first: bool = False) -> Rule:
    return Rule(table, chain, tuple(spec), first)


_COMMENT = re.compile(r'--comment "?(svc:[^" ]+)"?')


@dataclass
class Saved:
    """What ``iptables-save`` shows: per table, its chains and its rule lines."""

    chains: dict[str, set[str]] = field(default_factory=dict)
    lines: dict[str, list[str]] = field(default_factory=dict)


def parse_save(text: str) -> Saved:
    saved = Saved()
    table = ""
    for line in text.splitlines():
        if line.startswith("*"):
            table = line[1:].strip()
            saved.chains.setdefault(table, set())
            saved.lines.setdefault(table, [])
        elif line.startswith(":") and table:
            saved.chains[table].add(line[1:].split()[0])
        elif line.startswith("-A ") and table:
            saved.lines[table].append(line)
    return saved


class Firewall:
    """The rules of one owner (see the module docstring)."""

    def __init__(self, owner: str, iptables: str = "iptables") -> None:
        self.owner = owner
        self.iptables = iptables
        self._lock = threading.Lock()
        # comment -> rule of every rule of ours in the tables, known since the last full read
        # (None: unknown, read before the next change)
        self._known: dict[str, Rule] | None = None
        self._chains: set[str] = set()  # our own chains that exist (with _known)

    @property
    def iso1(self) -> str:
        return f"SVC-ISO1-{self.owner}"

    @property
    def iso2(self) -> str:
        return f"SVC-ISO2-{self.owner}"

    def comment(self, scope: str, r: Rule) -> str:
        return f"svc:{self.owner}:{scope}:{r.key()}"

    def apply(self, scope: str, rules: Iterable[Rule]) -> None:
        """Make the rules of ``scope`` exactly ``rules``."""
        self.change({scope: rules})

    def change(self, scopes: Mapping[str, Iterable[Rule]]) -> None:
        """Make the rules of each scope named exactly the ones given (one restore for all,
        when the daemon knows its rules); the other scopes stay as they are."""
        wanted = {scope: list(rules) for scope, rules in scopes.items()}
        with self._lock:
            if self._known is not None:
                try:
                    self._apply_known(wanted)
                    return
                except FirewallError:
                    self._known = None  # changed behind our back: read the tables again
            for scope, rules in wanted.items():
                self._sync({scope: rules}, only=scope)

    def reconcile(self, desired: Mapping[str, Iterable[Rule]],
                  keep: Callable[[str], bool] | None = None) -> int:
        """Make every scope of this owner exactly ``desired`` (a scope not named loses its
        rules, unless ``keep(scope)``: those stay as they are); returns how many rules
        went."""
        with self._lock:
            return self._sync({s: list(r) for s, r in desired.items()}, only=None, keep=keep)

    def drop(self, scopes: Callable[[str], bool]) -> int:
        """Remove the rules of every scope of this owner that ``scopes`` names; how many."""
        with self._lock:
            saved = parse_save(self._run(["iptables-save"]))
            tables: dict[str, list[str]] = {}
            for table, lines in saved.lines.items():
                for line in lines:
                    scope = self._scope_of(line)
                    if scope is not None and scopes(scope):
                        tables.setdefault(table, []).append("-D" + line[2:])
            if tables:
                self._known = None
                self._restore(tables)
            return sum(len(v) for v in tables.values())

    def _scope_of(self, line: str) -> str | None:
        m = _COMMENT.search(line)
        prefix = f"svc:{self.owner}:"
        if m is None or not m.group(1).startswith(prefix):
            return None
        return m.group(1)[len(prefix):].partition(":")[0]

    def clear(self) -> int:
        """Remove every rule and chain of this owner; returns how many rules went."""
        with self._lock:
            return self._sync({}, only=None, drop_chains=True)

    def _apply_known(self, scopes: dict[str, list[Rule]]) -> None:
        """The change from what this daemon knows it has, without reading the tables."""
        assert self._known is not None
        tables: dict[str, list[str]] = {}
        gone: list[str] = []
        added: dict[str, Rule] = {}
        for scope, rules in scopes.items():
            prefix = f"svc:{self.owner}:{scope}:"
            want = {self.comment(scope, r): r for r in rules}
            gone += [c for c in self._known if c.startswith(prefix) and c not in want]
            added.update((c, r) for c, r in want.items() if c not in self._known)
        for c in gone:
            r = self._known[c]
            tables.setdefault(r.table, []).append(
                " ".join([f"-D {r.chain}", *r.spec, "-m", "comment", "--comment", c]))
        for c, r in added.items():
            tables.setdefault(r.table, []).append(self._add_line(r, c))
        if not tables:
            return
        known_chains = Saved(chains={"filter": {r.chain for r in self._known.values()}
                                     | self._chains})
        self._declare_chains(known_chains, added.values(), tables)
        self._restore(tables)
        for c in gone:
            del self._known[c]
        self._known.update(added)
        self._chains = known_chains.chains["filter"] & {self.iso1, self.iso2}

    def _sync(self, desired: dict[str, list[Rule]], only: str | None,
              drop_chains: bool = False, keep: Callable[[str], bool] | None = None) -> int:
        saved = parse_save(self._run(["iptables-save"]))
        want = {self.comment(scope, r): r for scope, rules in desired.items() for r in rules}
        prefix = f"svc:{self.owner}:" + (f"{only}:" if only is not None else "")
        tables: dict[str, list[str]] = {}
        removed = 0
        have: set[str] = set()
        for table, lines in saved.lines.items():
            for line in lines:
                m = _COMMENT.search(line)
                if m is None or not m.group(1).startswith(prefix):
                    continue
                if keep is not None and keep(self._scope_of(line) or ""):
                    continue
                if m.group(1) in want and m.group(1) not in have:
                    have.add(m.group(1))
                else:
                    tables.setdefault(table, []).append("-D" + line[2:])
                    removed += 1
        for c, r in want.items():
            if c not in have:
                tables.setdefault(r.table, []).append(self._add_line(r, c))
        self._declare_chains(saved, want.values(), tables)
        if drop_chains:
            for chain in (self.iso1, self.iso2):
                if chain in saved.chains.get("filter", set()):
                    tables.setdefault("filter", []).extend([f"-F {chain}", f"-X {chain}"])
        if tables:
            try:
                self._restore(tables)
            except FirewallError:
                self._known = None
                raise
        if keep is not None:  # rules it kept unread: read the tables before the next change
            self._known = None
        elif only is None:  # a full read: from now on the daemon knows its rules
            self._known = {} if drop_chains else dict(want)
            self._chains = set() if drop_chains else \
                saved.chains.get("filter", set()) & {self.iso1, self.iso2}
        elif self._known is not None:
            self._known = {c: r for c, r in self._known.items()
                           if not c.startswith(prefix)} | want
        return removed

    @staticmethod
    def _add_line(r: Rule, comment: str) -> str:
        where = f"-I {r.chain} 1" if r.first else f"-A {r.chain}"
        return " ".join([where, *r.spec, "-m", "comment", "--comment", comment])

    def _declare_chains(self, saved: Saved, rules: Iterable[Rule],
                        tables: dict[str, list[str]]) -> None:
        """Our own chains that a rule names and that do not exist yet (declaring an existing
        chain in ``iptables-restore --noflush`` would flush it)."""
        mine = {self.iso1, self.iso2}
        for r in rules:
            for name in {r.chain, *r.spec} & mine:
                if name not in saved.chains.get(r.table, set()):
                    saved.chains.setdefault(r.table, set()).add(name)
                    tables.setdefault(r.table, []).insert(0, f":{name} - [0:0]")

    def _restore(self, tables: dict[str, list[str]]) -> None:
        text = "".join(f"*{t}\n" + "\n".join(lines) + "\nCOMMIT\n" for t, lines in
                       tables.items())
        self._run(["iptables-restore", "--noflush", "-w"], text)

    def _run(self, argv: list[str], stdin: str | None = None) -> str:
        if self.iptables != "iptables":
            argv = [self.iptables + argv[0].removeprefix("iptables"), *argv[1:]]
        try:
            result = subprocess.run(argv, input=stdin, capture_output=True, text=True,
                                    check=False, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise FirewallError(f"{argv[0]}: {exc}") from exc
        if result.returncode != 0:
            raise FirewallError(f"{argv[0]} failed: {result.stderr.strip()}")
        return result.stdout
