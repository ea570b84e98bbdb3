"""Runs a PyTorch reference script (../shared/bench/torch_reference.py or torch_imagenet.py,
each taking --json PATH) several times in a row and writes every figure's runs and median.

PyTorch's images/s for one model and mode moves a lot between calls on the same GPU kind
(resnet18_cifar bf16 + channels_last on H100s: 18,726 to 40,817 over nine calls, see
BENCHMARKS.md, session 27): a short model's step is a few hundred kernel launches from
Python, so the host's pace during the run sets it. One run beside convoy's figure is then a
coin toss; the median of several, with the spread, is the figure to compare with.

Usage: python3 torch_median.py SCRIPT [--runs N] [--json PATH] [-- SCRIPT_ARGS...]
"""
import json
import statistics
import subprocess
import sys
import tempfile


def main(argv):
    if not argv or argv[0].startswith("-"):
        sys.exit("torch_median.py: expected the reference script first, e.g. torch_reference.py")
    script, rest = argv[0], argv[1:]
    extra = []
    if "--" in rest:
        cut = rest.index("--")
        rest, extra = rest[:cut], rest[cut + 1:]
    runs, out = 3, None
    i = 0
    while i < len(rest):
        flag = rest[i]
        if flag not in ("--runs", "--json") or i + 1 >= len(rest):
            sys.exit(f"torch_median.py: unknown or incomplete argument {flag!r}")
        if flag == "--runs":
            try:
                runs = int(rest[i + 1])
            except ValueError:
                sys.exit(f"torch_median.py: --runs {rest[i + 1]!r} is not a whole number")
            if runs < 1:
                sys.exit(f"torch_median.py: --runs {runs}: need at least one run")
        else:
            out = rest[i + 1]
        i += 2

    figures = {}
    meta = {}
    for run in range(runs):
        with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
            done = subprocess.run([sys.executable, script, "--json", tmp.name, *extra])
            if done.returncode != 0:
                sys.exit(f"torch_median.py: {script} run {run + 1} of {runs} exited with {done.returncode}")
            result = json.load(open(tmp.name))
        for key, value in result.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and "/" in key:
                figures.setdefault(key, []).append(value)
            else:
                meta[key] = value

    summary = {**meta, "runs": runs, "median": {}, "all": {}}
    for key, values in figures.items():
        summary["median"][key] = statistics.median(values)
        summary["all"][key] = values
        spread = ", ".join(f"{v:,.0f}" for v in values)
        print(f"{key}: median {statistics.median(values):,.0f} (runs: {spread})")
    if out:
        with open(out, "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
