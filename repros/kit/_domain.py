"""Sweeps a pack's declared domain as a lane: every point in a child process of its own.

A change that widens what code accepts declares that domain in ``[packs.NN.domain]`` (the axes, the points it
must admit, the points it must still decline, the devices the claim is for; harness/lane/tracking/domain.py).
The harness gives this kit the declaration (``--domain JSON``) and the pack's point script (``--point-script``);
the kit runs ``python POINT_SCRIPT --point '{"axis": value, ...}' --expect admit|decline`` once per point, several
at a time (``--jobs``), so a CUDA fault, an abort or a segmentation fault in one point cannot poison another.

A point script prints one line ``DOMAIN_POINT {json}`` and exits 0:

* ``outcome``: ``matched`` (the build took the point, ran it forward and backward and matched its reference
  within ``tol``), ``mismatch`` (it took the point and missed the reference) or ``declined`` (the code said no
  and the caller's fallback runs, as the base does);
* ``errors`` ({tensor: error}) and ``tol`` for a point it ran; ``base`` (``admitted`` / ``declined``): what the
  unchanged build does at the point, when the script can ask it (a patched lane with ``with_baseline``);
  ``detail``: anything worth a line.

Anything else is a crash: an exit status other than 0, a signal, no ``DOMAIN_POINT`` line, or a point that ran
past ``--point-timeout``. The kit names every crashed point with its reason (the last error line, or the
signal) and fails the lane: it prints the point's output tail and exits 1, whatever the other points did.

What a build must do at a point (``patched``: the lane's build carries the series):

=========  ===========================================  ===================================================
expect     patched build                                unpatched build
=========  ===========================================  ===================================================
admit      ``matched``                                  ``matched`` (already admitted) or ``declined``
decline    ``declined``, and the base declines it too   ``declined``
=========  ===========================================  ===================================================

The verdict: patched, every point as above -> FIX_VALIDATED, else FIX_FAILED; unpatched, every point as above
and at least one point to admit declined -> BUG_REPRODUCED (the change is needed), every one already admitted ->
BUG_ABSENT. One ``domain_point`` figure per point (the point, what was expected, what happened, the error figure
or the crash reason) and one ``domain_summary`` figure go into the receipt, so a body can quote it.

``--probe-declines`` (a patched lane): what happens beyond the change's own bounds. Only the points of a
``bound = true`` decline grid run, each with ``--probe`` (the point script lifts the guards the change adds and
lets the code run). A decline is *backed* when the code then fails there: it crashes (the crash is the finding,
not a lane failure), misses its reference, or is still declined by a rule the change keeps. A point that runs
and matches is not backed: the bound refuses a shape the code handles. Every bound decline backed ->
FIX_VALIDATED, else FIX_FAILED; one ``domain_probe`` figure per point, one ``domain_probe_summary``.

    HARNESS_PATCHED=1 python repros/kit/_domain.py --distribution megatron-core --module megatron.core \\
        --point-script repros/megatron-lm/pack02_domain_point.py --domain "$(cat decl.json)"
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from _lane import figure, parser, patched, start, verdict

ROOT = Path(__file__).resolve().parents[2]
TAG = "DOMAIN_POINT"
OUTCOMES = ("matched", "mismatch", "declined")
_ERROR_LINE = re.compile(r"^\s*([\w.]*(Error|Exception|Fault|Abort)\w*|error|RuntimeError|AssertionError)\b.*",
                         re.I)


def default_jobs() -> int:
    given = os.environ.get("PATCHLANE_DOMAIN_JOBS", "").strip()
    if given.isdigit() and int(given) > 0:
        return int(given)
    return max(1, min(os.cpu_count() or 1, 16))


def crash_reason(returncode: int | None, stderr: str, stdout: str) -> str:
    """One line: the signal that killed the point, or its last error line, or its last line."""
    if returncode is not None and returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        sig = f"killed by {name}"
    else:
        sig = f"exit status {returncode}" if returncode else "exit status 0 but no DOMAIN_POINT line"
    lines = [ln.strip() for ln in (stderr + "\n" + stdout).splitlines() if ln.strip()]
    errors = [ln for ln in lines if _ERROR_LINE.match(ln) and not ln.startswith(TAG)]
    last = errors[-1] if errors else (lines[-1] if lines else "")
    return f"{sig}: {last[:300]}" if last else sig


def run_point(script: Path, point: dict, expect: str, timeout: float, probe: bool = False) -> dict:
    """Run one point in a child process; its parsed DOMAIN_POINT result, or a crash."""
    t0 = time.monotonic()
    cmd = [sys.executable, str(script), "--point", json.dumps(point["values"], sort_keys=True), "--expect", expect]
    cmd += ["--probe"] if probe else []
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        return {"crashed": True, "reason": f"ran past the point time limit ({timeout:g} s)", "stdout": out,
                "stderr": err, "seconds": round(time.monotonic() - t0, 1)}
    seconds = round(time.monotonic() - t0, 1)
    result = None
    for line in done.stdout.splitlines():
        if line.startswith(TAG + " "):
            try:
                result = json.loads(line[len(TAG) + 1:])
            except ValueError:
                result = None
    if done.returncode != 0 or not isinstance(result, dict) or result.get("outcome") not in OUTCOMES:
        return {"crashed": True, "reason": crash_reason(done.returncode, done.stderr, done.stdout),
                "stdout": done.stdout, "stderr": done.stderr, "seconds": seconds}
    return dict(result, crashed=False, seconds=seconds, stdout=done.stdout, stderr=done.stderr)


def judge(expect: str, res: dict, is_patched: bool) -> tuple[bool, str]:
    """Whether the point behaved as it must on this build, and why not."""
    if res["crashed"]:
        return False, f"crashed ({res['reason']})"
    outcome, base = res["outcome"], res.get("base")
    if outcome == "mismatch":
        return False, f"ran but missed its reference ({_errors(res)})"
    if expect == "admit":
        if outcome == "matched" or not is_patched:
            return True, ""
        return False, "declared admitted, but the change declined it"
    if outcome != "declined":
        return False, "declared declined, but the build admitted it"
    if is_patched and base == "admitted":
        return False, "the change declines it, but the base admitted it"
    return True, ""


UNPROBED = "PROBE_UNAVAILABLE"  # a point script's line: it could not lift the bound on this build


def judge_probe(res: dict) -> tuple[bool, str]:
    """Whether a bound decline is backed by what the code does with the change's guards lifted, and how."""
    if UNPROBED in res.get("stdout", "") + res.get("stderr", ""):
        return False, "the point script could not lift the bound on this build"
    if res["crashed"]:
        return True, f"crashed without the bound ({res['reason']})"
    if res["outcome"] == "mismatch":
        return True, f"ran without the bound and missed its reference ({_errors(res)})"
    if res["outcome"] == "declined":
        return True, "still declined with the change's guards lifted (a rule the change keeps)"
    return False, f"ran and matched its reference without the bound ({_errors(res)}): the bound refuses a shape " \
                  "the code handles"


def probe(script: Path, points: list[dict], jobs: int, timeout: float, device: str, gpu) -> int:
    """``--probe-declines``: run every bound decline with the change's guards lifted; FIX_VALIDATED when each one
    fails there."""
    chosen = [pt for pt in points if pt["expect"] == "decline" and pt.get("bound")]
    control = next((pt for pt in points if pt["expect"] == "admit"), None)
    print(f"probe: {len(chosen)} bound decline(s) of {len(points)} point(s), the change's guards lifted, "
          f"{jobs} at a time", flush=True)
    if not chosen or control is None:
        verdict("FIX_FAILED", failures=["no decline grid says bound = true: nothing to probe" if not chosen else
                                        "no admitted point to run as the control"], points=0)
        return 0
    results: dict[int, dict] = {}
    t0 = time.monotonic()
    # the control: an admitted point run the same way must match, or a failure beyond the bound could be the
    # host's (a missing library, a busy GPU) rather than the code's
    ctl = run_point(script, control, "admit", timeout, True)
    ctl_ok = not ctl["crashed"] and ctl["outcome"] == "matched"
    figure("domain_probe_control", "matched" if ctl_ok else ("crashed" if ctl["crashed"] else ctl["outcome"]), None,
           point=control["values"], ok=ctl_ok, reason=ctl.get("reason"), seconds=ctl["seconds"])
    said = "matched" if ctl_ok else f"FAILED: {ctl.get('reason') or ctl.get('outcome')}"
    print(f"probe control {_name(control)}: {said}", flush=True)
    if not ctl_ok:
        tail = (ctl.get("stdout", "") + "\n" + ctl.get("stderr", "")).strip().splitlines()[-25:]
        print("\n".join(f"    {ln}" for ln in tail), flush=True)
        verdict("FIX_FAILED", failures=[f"control {_name(control)} did not match with the guards lifted: a failure "
                                        "beyond the bound would prove nothing"], points=0)
        return 0
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(run_point, script, pt, "decline", timeout, True): i for i, pt in enumerate(chosen)}
        for fut in as_completed(futures):
            i = futures[fut]
            results[i] = res = fut.result()
            what = "crashed" if res["crashed"] else res["outcome"]
            print(f"[{len(results)}/{len(chosen)}] {_name(chosen[i])}: {what} ({res['seconds']} s, "
                  f"{time.monotonic() - t0:.0f} s in)", file=sys.stderr, flush=True)
    unbacked, counts = [], {"crashed": 0, "mismatch": 0, "declined": 0, "matched": 0}
    for i, pt in enumerate(chosen):
        res = results[i]
        backed, why = judge_probe(res)
        status = "crashed" if res["crashed"] else res["outcome"]
        counts[status] += 1
        errs = {k: v for k, v in (res.get("errors") or {}).items() if isinstance(v, (int, float))}
        figure("domain_probe", status, None, point=pt["values"], backed=backed, why=why, errors=errs or None,
               tol=res.get("tol"), detail=res.get("detail"), note=pt.get("note") or None, seconds=res["seconds"])
        print(f"  {_name(pt)}: {'backed' if backed else 'NOT BACKED'}: {why}", flush=True)
        if not backed:
            unbacked.append(f"{_name(pt)}: {why}")
    figure("domain_probe_summary", len(chosen), None, device=device, gpu=gpu, points=len(chosen),
           backed=len(chosen) - len(unbacked),
           unbacked=len(unbacked), seconds=round(time.monotonic() - t0, 1), **counts)
    verdict("FIX_FAILED" if unbacked else "FIX_VALIDATED", failures=unbacked, points=len(chosen), **counts)
    return 0


def _name(pt: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in pt["values"].items())


def _errors(res: dict) -> str:
    errs = res.get("errors") or {}
    text = ", ".join(f"{k} {v:.3g}" for k, v in errs.items() if isinstance(v, (int, float)))
    tol = res.get("tol")
    return text + (f"; tolerance {tol:.3g}" if isinstance(tol, (int, float)) else "")


def arch(facts: dict) -> str | None:
    cc = facts.get("compute_capability")
    if not cc:
        return None
    major, _, minor = str(cc).partition(".")
    return f"sm_{major}{minor or '0'}"


def main() -> int:
    p = parser(__doc__)
    p.add_argument("--distribution", required=True, help="the package under test, for the stamp")
    p.add_argument("--module", required=True, help="its import name, for the stamp")
    p.add_argument("--point-script", required=True, help="runs one point (repository-relative or absolute)")
    p.add_argument("--domain", required=True, help="the declaration, as harness/lane/tracking/domain.py writes it")
    p.add_argument("--jobs", type=int, default=default_jobs(), help="points run at once (PATCHLANE_DOMAIN_JOBS)")
    p.add_argument("--point-timeout", type=float, default=float(os.environ.get("PATCHLANE_DOMAIN_POINT_TIMEOUT",
                                                                                  420)))
    p.add_argument("--probe-declines", action="store_true",
                   help="run only the bound declines, with the change's guards lifted (a patched lane)")
    args = p.parse_args()
    facts = start(args, args.distribution, args.module)
    is_patched = patched()
    script = Path(args.point_script)
    script = script if script.is_absolute() else ROOT / script
    decl = json.loads(args.domain)
    points = decl["points"]
    device = arch(facts) or "cpu"  # no CUDA device seen: the points ran on the CPU
    print(f"domain: {len(points)} point(s) over {', '.join(decl['axes'])}, {args.jobs} at a time, "
          f"{'patched' if is_patched else 'unpatched'} build, device {device or 'unknown'} "
          f"(claim made for {', '.join(decl.get('devices', []))})", flush=True)
    if args.probe_declines:
        if not is_patched:
            raise SystemExit("--probe-declines probes the change's bounds: run it on the patched build")
        return probe(script, points, args.jobs, args.point_timeout, device, facts.get("gpu"))
    results: dict[int, dict] = {}
    t0 = time.monotonic()

    def done(i: int, res: dict) -> None:
        results[i] = res
        name = ",".join(f"{k}={v}" for k, v in points[i]["values"].items())
        what = "CRASHED: " + res["reason"] if res["crashed"] else res["outcome"]
        print(f"[{len(results)}/{len(points)}] {name}: {what} ({res['seconds']} s, {time.monotonic() - t0:.0f} s in)",
              file=sys.stderr, flush=True)

    # one point to decline runs alone first: what every point's first import builds once per host (a JIT-compiled
    # extension, a cache directory) is then built by one process, not by all of them at once
    first = next((i for i, pt in enumerate(points) if pt["expect"] == "decline"), None)
    if first is not None and args.jobs > 1:
        done(first, run_point(script, points[first], "decline", args.point_timeout))
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {pool.submit(run_point, script, pt, pt["expect"], args.point_timeout): i
                   for i, pt in enumerate(points) if i not in results}
        for fut in as_completed(futures):
            done(futures[fut], fut.result())
    failures, crashed, counts = [], [], {"matched": 0, "declined": 0, "mismatch": 0, "crashed": 0}
    newly, max_err, tol = 0, 0.0, None
    for i, pt in enumerate(points):
        res = results[i]
        name = ",".join(f"{k}={v}" for k, v in pt["values"].items())
        ok, why = judge(pt["expect"], res, is_patched)
        status = "crashed" if res["crashed"] else res["outcome"]
        counts[status] += 1
        errs = {k: v for k, v in (res.get("errors") or {}).items() if isinstance(v, (int, float))}
        if status == "matched":
            max_err = max([max_err, *errs.values()])
            tol = res.get("tol", tol)
            if res.get("base") == "declined":
                newly += 1
        figure("domain_point", status, None, point=pt["values"], expect=pt["expect"], ok=ok,
               base=res.get("base"), errors=errs or None, max_error=max(errs.values()) if errs else None,
               tol=res.get("tol"), reason=res.get("reason") if res["crashed"] else (why or None),
               detail=res.get("detail"), note=pt.get("note") or None, seconds=res["seconds"])
        line = f"  {name}: expect {pt['expect']}, {status}"
        line += f" ({_errors(res)})" if errs else ""
        line += f"; base {res['base']}" if res.get("base") else ""
        print(line + ("" if ok else f"  <-- {why}"), flush=True)
        if res["crashed"]:
            crashed.append(f"{name}: {res['reason']}")
            print(f"--- output of crashed point {name} (last lines) ---", flush=True)
            tail = (res.get("stdout", "") + "\n" + res.get("stderr", "")).strip().splitlines()[-25:]
            print("\n".join(f"    {ln}" for ln in tail), flush=True)
        elif not ok:
            failures.append(f"{name}: {why}")
    admit_declined = sum(1 for i, pt in enumerate(points) if pt["expect"] == "admit"
                         and not results[i]["crashed"] and results[i]["outcome"] == "declined")
    figure("domain_summary", len(points), None, device=device, gpu=facts.get("gpu"), devices=decl.get("devices"),
           points=len(points), matched=counts["matched"], declined=counts["declined"],
           mismatch=counts["mismatch"], crashed=counts["crashed"], newly_admitted=newly,
           admit_points_declined=admit_declined, max_error=max_err if counts["matched"] else None, tol=tol,
           failures=len(failures) + len(crashed), seconds=round(time.monotonic() - t0, 1))
    if crashed:
        print(f"domain: {len(crashed)} point(s) crashed: " + "; ".join(crashed), flush=True)
        print(f"domain: {len(crashed)} point(s) crashed, first {crashed[0]}", file=sys.stderr, flush=True)
        if is_patched:
            verdict("FIX_FAILED", crashed=crashed, failures=failures)
        return 1
    if is_patched:
        verdict("FIX_FAILED" if failures else "FIX_VALIDATED", failures=failures, points=len(points),
                matched=counts["matched"], declined=counts["declined"])
    elif failures:
        verdict("BUG_ABSENT", failures=failures, points=len(points))
    else:
        verdict("BUG_REPRODUCED" if admit_declined else "BUG_ABSENT", points=len(points),
                admit_points_declined=admit_declined)
    return 0


if __name__ == "__main__":
    sys.exit(main())
