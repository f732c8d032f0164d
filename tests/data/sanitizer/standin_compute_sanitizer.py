"""A STAND-IN for compute-sanitizer, for tests on machines without a GPU. Not the real tool.

What is real: its ``--help``/``--version`` text (the H200's compute-sanitizer 2025.3.1, file in
$STANDIN_HELP), the option parsing that text implies, the target command it is given (really run:
the real pytest with the real faulthunt plugin), and the sanitizer output it writes, which is a
real H200 capture replayed verbatim. What is simulated: the decision that the target had a memory
error. A process under the stand-in "has a memory error" when

- the target exits non-zero and a key of $STANDIN_REPLAY (JSON ``{"substring of the target
  command": {"text": path, "xml": path}}``) is in its command line (a failing test), or
- any process under it writes a file into $STANDIN_FAULT_DIR (which the stand-in sets for the
  target and its children) named by its pid and holding a replay key: a fault in that process.
  As the real tool does, the target's own faults always count, its children's only when
  ``--target-processes all`` is in effect (given, or the default the help text lists).

It then writes the replayed text to ``--log-file`` (else stdout) and the XML to ``--save``, and
exits with ``--error-exitcode`` as the real tool does when it found errors. Every invocation's
argv is appended to $STANDIN_ARGV_LOG. $STANDIN_SLEEP seconds of sleep before the target stand in
for the tool's own cost (start-up, instrumentation, the slowed kernels: time the CPU waits while
the GPU works), so that CPU tests and the bench can see what parallel sanitizer processes buy.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import time


def read(path):
    with open(path, encoding="utf-8") as fh:
        return fh.read()


help_text = read(os.environ["STANDIN_HELP"])
args = sys.argv[1:]
if args in (["--help"], ["-h"]):
    sys.stdout.write(help_text)
    sys.exit(0)
if args in (["--version"], ["-v"]):
    sys.stdout.write("\n".join(help_text.splitlines()[:3]) + "\n")
    sys.exit(0)

takes_arg = set(re.findall(r"^\s{1,6}(?:-\w \[ )?--([a-z0-9-]+)(?: \])? arg", help_text, re.M))
known = set(re.findall(r"^\s{1,6}(?:-\w \[ )?--([a-z0-9-]+)", help_text, re.M))
defaults = dict(re.findall(r"^\s{1,6}(?:-\w \[ )?--([a-z0-9-]+)(?: \])? arg \(=([^)]*)\)", help_text, re.M))
opts = {}
i = 0
while i < len(args) and args[i].startswith("--"):
    name = args[i][2:]
    if name not in known:
        print(f"========= Error: unrecognised option '--{name}'", file=sys.stderr)
        sys.exit(1)
    if name in takes_arg:
        opts[name] = args[i + 1]
        i += 2
    else:
        opts[name] = True
        i += 1
target = args[i:]
with open(os.environ["STANDIN_ARGV_LOG"], "a", encoding="utf-8") as fh:
    fh.write(json.dumps(sys.argv) + "\n")


def emit(text, xml, found):
    if "log-file" in opts:
        with open(opts["log-file"], "w", encoding="utf-8") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text)
    if opts.get("xml") and "save" in opts:
        with open(opts["save"], "w", encoding="utf-8") as fh:
            fh.write(xml)
    if found and "error-exitcode" in opts:
        sys.exit(int(opts["error-exitcode"]))


if os.environ.get("STANDIN_TOOL_FAILS"):
    # what the real 2026.4 binary printed on a machine without a GPU (text/cpu_only_machine_2026.4.txt)
    emit(read(os.environ["STANDIN_TOOL_FAILS"]), "", False)
    sys.exit(255)
time.sleep(float(os.environ.get("STANDIN_SLEEP") or 0))
replays = json.loads(os.environ.get("STANDIN_REPLAY", "{}"))
follow_children = opts.get("target-processes", defaults.get("target-processes", "application-only")) == "all"
with tempfile.TemporaryDirectory(prefix="standin-faults-") as faults:
    proc = subprocess.Popen(target, env={**os.environ, "STANDIN_FAULT_DIR": faults})
    rc = proc.wait()
    keys = []
    for name in sorted(os.listdir(faults)):
        if name.isdigit() and (int(name) == proc.pid or follow_children):
            keys.append(read(os.path.join(faults, name)).strip())
replay = next((replays[k] for k in keys if k in replays), None)
if replay is None and rc != 0:
    replay = next((files for key, files in replays.items() if key in " ".join(target)), None)
text = "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n"
xml = '<?xml version="1.0" encoding="utf-8"?>\n<ComputeSanitizerOutput>\n</ComputeSanitizerOutput>\n'
if replay:
    text = read(replay["text"])
    if replay.get("xml"):
        xml = read(replay["xml"])
emit(text, xml, bool(replay))
sys.exit(rc)
