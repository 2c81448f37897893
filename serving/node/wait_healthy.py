"""Wait until a URL answers 200 (systemd ExecStartPost): the unit stays 'activating' until then.

Runs on the node's bare python3, so standard library only.
"""

import sys
import time
import urllib.request


def main(url: str, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    last = "no answer yet"
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                if resp.status == 200:
                    return 0
                last = f"HTTP {resp.status}"
        except Exception as exc:  # noqa: BLE001 - any failure means "not yet"
            last = str(exc)
        time.sleep(2)
    print(f"{url} not healthy after {timeout_s:.0f} s: {last}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], float(sys.argv[2])))
