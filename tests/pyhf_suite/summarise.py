"""The table of scripts/pyhf_suite.sh: per pyhf test module the outcomes, then the failures
grouped by their first line (the reason)."""

import collections
import sys
import xml.etree.ElementTree as ET


def main(path):
    root = ET.parse(path).getroot()
    counts = collections.defaultdict(collections.Counter)
    reasons = collections.defaultdict(list)
    for case in root.iter("testcase"):
        module = case.get("classname", "").split(".")[-1] or "?"
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed" if child.tag == "failure" else "error"
                message = (child.get("message") or child.text or "").strip().splitlines()
                reasons[(message[0][:160] if message else "(no message)")].append(f"{module}::{case.get('name')}")
            elif child.tag == "skipped":
                outcome = "xfailed" if child.get("type") == "pytest.xfail" else "skipped"
        counts[module][outcome] += 1
    kinds = ("passed", "failed", "error", "skipped", "xfailed")
    print("| module | " + " | ".join(kinds) + " |")
    print("|---|" + "---|" * len(kinds))
    total = collections.Counter()
    for module in sorted(counts):
        total.update(counts[module])
        print(f"| {module} | " + " | ".join(str(counts[module][k]) for k in kinds) + " |")
    print("| **all** | " + " | ".join(f"**{total[k]}**" for k in kinds) + " |")
    print("\n## Failures by reason\n")
    for reason, tests in sorted(reasons.items(), key=lambda r: -len(r[1])):
        print(f"- {len(tests)} × `{reason}` — e.g. {', '.join(tests[:3])}")


if __name__ == "__main__":
    main(sys.argv[1])
