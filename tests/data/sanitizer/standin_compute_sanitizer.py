"""A STAND-IN for compute-sanitizer, for tests on machines without a GPU. Not the real tool.

What is real: its ``--help``/``--version`` text (the H200's compute-sanitizer 2025.3.1, file in
$STANDIN_HELP), the option parsing that text implies, the target command it is given (really run:
the real pytest with the real faulthunt plugin), and the sanitizer output it writes, which is a
real H200 capture replayed verbatim. What is simulated: the decision that the target had a memory
error. It replays the capture named for a test in $STANDIN_REPLAY (JSON ``{"substring of the
target command": {"text": path, "xml": path}}``) when the target exits non-zero, writes the text to
``--log-file`` (else stdout) and the XML to ``--save``, and exits with ``--error-exitcode``
as the real tool does when it found errors. Every invocation's argv is appended to $STANDIN_ARGV_LOG.
"""

import json
import os
import re
import subprocess
import sys

help_text = open(os.environ["STANDIN_HELP"], encoding="utf-8").read()
args = sys.argv[1:]
if args in (["--help"], ["-h"]):
    sys.stdout.write(help_text)
    sys.exit(0)
if args in (["--version"], ["-v"]):
    sys.stdout.write("\n".join(help_text.splitlines()[:3]) + "\n")
    sys.exit(0)

takes_arg = set(re.findall(r"^\s{1,6}(?:-\w \[ )?--([a-z0-9-]+)(?: \])? arg", help_text, re.M))
known = set(re.findall(r"^\s{1,6}(?:-\w \[ )?--([a-z0-9-]+)", help_text, re.M))
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

if os.environ.get("STANDIN_TOOL_FAILS"):
    # what the real 2026.4 binary printed on a machine without a GPU (text/cpu_only_machine_2026.4.txt)
    text = open(os.environ["STANDIN_TOOL_FAILS"], encoding="utf-8").read()
    if "log-file" in opts:
        with open(opts["log-file"], "w", encoding="utf-8") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text)
    sys.exit(255)
proc = subprocess.run(target)
rc = proc.returncode
replay = None
if rc != 0:
    for key, files in json.loads(os.environ.get("STANDIN_REPLAY", "{}")).items():
        if key in " ".join(target):
            replay = files
            break
text = "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n"
xml = '<?xml version="1.0" encoding="utf-8"?>\n<ComputeSanitizerOutput>\n</ComputeSanitizerOutput>\n'
if replay:
    text = open(replay["text"], encoding="utf-8").read()
    if replay.get("xml"):
        xml = open(replay["xml"], encoding="utf-8").read()
if "log-file" in opts:
    with open(opts["log-file"], "w", encoding="utf-8") as fh:
        fh.write(text)
else:
    sys.stdout.write(text)
if opts.get("xml") and "save" in opts:
    with open(opts["save"], "w", encoding="utf-8") as fh:
        fh.write(xml)
if replay and "error-exitcode" in opts:
    sys.exit(int(opts["error-exitcode"]))
sys.exit(rc)
