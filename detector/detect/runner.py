"""The runner: the enabled rules' detectors in findings order, run as one consumer of the decoded batches.

A bug in one detector must not cost the user the other rules' findings:
`DetectorSet` runs the enabled detectors as one consumer, and a detector
whose update(), merge() or findings() raises is stopped and recorded as a
`DetectorFailure` (rule, stage, error, the batch and frames it was working
on, a bounded traceback) while the others, the flow table and the evidence
go on. The commands write the failures into findings.json and the reports
and exit with their own status. With DETECTOR_RAISE_FAILURES=1 in the
environment (the test suite sets it) a failure raises instead, so no test
can pass over one without noticing.

The rules are found in REGISTRY, which importing detector.detectors fills (one module per rule); the runner
imports no rule.
"""
from __future__ import annotations

import os
import traceback
from contextlib import contextmanager
from dataclasses import asdict, dataclass

from ..rules import load_rules
from ..site import EMPTY
from .detector import REGISTRY, AnalysisContext, Detector

# Set to 1, a detector that raises stops the run with its own exception instead of being recorded.
RAISE_ENV = "DETECTOR_RAISE_FAILURES"
# A failure's record stays small whatever went wrong: the innermost frames of the traceback (where the
# bug is) and bounded texts (an exception's message may quote a huge array or packet bytes).
TRACEBACK_FRAMES = 12
TRACEBACK_CHARS_MAX = 8000
MESSAGE_CHARS_MAX = 500



def _finding_order(rule_ids: list[str]) -> list[str]:
    """Rule ids sorted, each after the rules named in its AFTER (those that are present)."""
    present = set(rule_ids)
    done: list[str] = []
    visiting: set[str] = set()

    def visit(rule_id: str) -> None:
        if rule_id in done:
            return
        if rule_id in visiting:
            raise ValueError(f"detectors wait on each other in a cycle through '{rule_id}'")
        visiting.add(rule_id)
        for before in sorted(REGISTRY[rule_id].AFTER):
            if before in present:
                visit(before)
        visiting.discard(rule_id)
        done.append(rule_id)

    for rule_id in sorted(present):
        visit(rule_id)
    return done


def active_detectors(rules=None, site=None) -> list[Detector]:
    """Fresh instances of every registered detector whose rule is enabled, in findings order.

    `rules` is the mapping of `detector.rules.load_rules`; None loads the defaults. `site` is the site
    file's `detector.site.Site`, given to every detector; None: no site file.
    """
    if rules is None:
        rules = load_rules()
    chosen = [rule_id for rule_id, rule in rules.items() if rule.enabled and rule_id in REGISTRY]
    return [REGISTRY[rule_id](rules[rule_id], site) for rule_id in _finding_order(chosen)]


def run_findings(detectors: list[Detector], ctx: AnalysisContext) -> list:
    """Ask each detector for its findings in order, recording them in `ctx` for those that follow.

    An error propagates; `DetectorSet.findings` is the isolated form.
    """
    out = []
    for det in detectors:
        found = det.findings(ctx)
        ctx.findings[det.rule_id] = found
        out.extend(found)
    return out


def _one_line(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


@dataclass
class DetectorFailure:
    """A detector that raised: where (rule, stage, batch, frames, capture), what, and the traceback."""

    rule: str
    stage: str                          # update, merge or findings
    error: str                          # the exception's type
    message: str
    traceback: str
    batch: int | None = None            # 1-based number of the batch being folded in (stage update)
    frames: list[int] | None = None     # [first, last] frame number of that batch
    capture: str | None = None          # the file (or interface) of that batch

    @classmethod
    def of(cls, rule: str, stage: str, exc: BaseException, batch=None, batch_no: int | None = None):
        lines = traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-TRACEBACK_FRAMES)
        text = "".join(lines)
        if len(text) > TRACEBACK_CHARS_MAX:
            text = "...\n" + text[-TRACEBACK_CHARS_MAX:]
        failure = cls(rule=rule, stage=stage, error=type(exc).__name__,
                      message=_one_line(exc, MESSAGE_CHARS_MAX), traceback=text)
        if batch is not None and len(batch):
            frames = batch["frame"]
            failure.batch = batch_no
            failure.frames = [int(frames.min()), int(frames.max())]
            failure.capture = batch.source or None
        return failure

    def to_json(self) -> dict:
        return asdict(self)

    def where(self) -> str:
        """'in update() at frames 1-6532 (batch 1 of x.pcap)', or 'in findings()'."""
        text = f"in {self.stage}()"
        if self.frames is not None:
            text += f" at frames {self.frames[0]}-{self.frames[1]} (batch {self.batch}"
            text += f" of {self.capture})" if self.capture else ")"
        return text

    def summary(self) -> str:
        """One line: which rule failed where, and with what."""
        return f"rule {self.rule} failed {self.where()}: {self.error}: {self.message}"

    def bug_line(self, traceback_in) -> str:
        """The line for stderr: what failed where, that it is a bug of ours, and where its traceback is."""
        return (f"{self.summary()} -- a bug in detector, not in the capture: this rule did not run to the end "
                f"and its findings may be missing (the other rules did); please report it with the traceback "
                f"in {traceback_in}")


def raise_failures() -> bool:
    """True where a detector's error must stop the run (the test suite: see RAISE_ENV)."""
    return os.environ.get(RAISE_ENV) == "1"


class DetectorSet:
    """The enabled detectors as one consumer of batches, each isolated from the others' errors.

    A detector that raises in update(), merge() or findings() is recorded in
    `failures` and asked nothing more: its state is suspect, its findings may
    be missing. The detectors that read its findings (AFTER) see none.
    """

    def __init__(self, detectors: list[Detector], site=None):
        self.detectors = detectors
        self.site = EMPTY if site is None else site     # the site file the detectors were built with
        self.failures: dict[str, DetectorFailure] = {}
        self.batches = 0
        self.needs_fingerprint = any(getattr(det, "needs_fingerprint", True) for det in detectors)
        # the application side-tables (detector.decode.app) the engine builds beside the header decode
        self.app_tables = tuple(sorted({name for det in detectors for name in det.APP_TABLES}))

    @property
    def rule_ids(self) -> list[str]:
        return [det.rule_id for det in self.detectors]

    def running(self) -> list[Detector]:
        return [det for det in self.detectors if det.rule_id not in self.failures]

    @contextmanager
    def _guard(self, det: Detector, stage: str, batch=None):
        try:
            yield
        except Exception as exc:   # a bug in one detector: record it, keep the others going
            if raise_failures():
                raise
            self.failures[det.rule_id] = DetectorFailure.of(det.rule_id, stage, exc, batch, self.batches)

    def update(self, batch) -> None:
        self.batches += 1
        for det in self.running():
            with self._guard(det, "update", batch):
                det.update(batch)

    def merge(self, other: DetectorSet) -> DetectorSet:
        """Fold `other`'s states (the same rules, the same site file) into these; a rule failed in either stays
        failed."""
        if other.site != self.site:
            raise ValueError(f"cannot merge detector states built with different site files ({other.site.path} "
                             f"and {self.site.path})")
        for rule_id, failure in other.failures.items():
            self.failures.setdefault(rule_id, failure)
        theirs = {det.rule_id: det for det in other.running()}
        for det in self.running():
            if det.rule_id in theirs:
                with self._guard(det, "merge"):
                    det.merge(theirs[det.rule_id])
        self.batches += other.batches
        return self

    def joined(self, joins) -> None:
        """After a merge: what the flow table's merge said about the connections it joined across the cut
        (flows.merge.CutJoins), for each running detector (Detector.joined)."""
        for det in self.running():
            with self._guard(det, "merge"):
                det.joined(joins)

    def findings(self, ctx: AnalysisContext) -> list:
        """Every running detector's findings, in the detectors' order (analysis.conclude sorts them), each
        annotated by every detector once all are known (Detector.annotate)."""
        out = []
        for det in self.detectors:
            ctx.findings[det.rule_id] = []
            if det.rule_id in self.failures:
                continue
            with self._guard(det, "findings"):
                out.extend(run_findings([det], ctx))
        for det in self.running():
            with self._guard(det, "findings"):
                det.annotate(out, ctx)
        return [f for f in out if f.rule not in self.failures]     # a rule that failed annotating is suspect

    def failure_list(self) -> list[DetectorFailure]:
        """The failures in the detectors' order."""
        return [self.failures[rule_id] for rule_id in self.rule_ids if rule_id in self.failures]
