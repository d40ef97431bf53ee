"""A workload that ignores SIGTERM and leaves a child in its process group.

Stopping it must escalate to SIGKILL and take the child down with it.
"""

import signal
import socket
import subprocess
import sys
import time

signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
print(f"child {child.pid}", flush=True)
server = socket.socket()
server.bind(("127.0.0.1", int(sys.argv[1])))
server.listen()
time.sleep(300)
