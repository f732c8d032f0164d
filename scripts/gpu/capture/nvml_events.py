"""Listen for NVML Xid events while a command runs; print each as JSON."""
import json
import subprocess
import sys
import threading
import time
import pynvml as N

N.nvmlInit()
h = N.nvmlDeviceGetHandleByIndex(0)
es = N.nvmlEventSetCreate()
try:
    sup = N.nvmlDeviceGetSupportedEventTypes(h)
except N.NVMLError as e:
    sup = N.nvmlEventTypeXidCriticalError
    print(json.dumps({"supported_error": str(e)}), flush=True)
N.nvmlDeviceRegisterEvents(h, N.nvmlEventTypeXidCriticalError & sup, es)
print(json.dumps({"driver": N.nvmlSystemGetDriverVersion(), "supported": sup}), flush=True)
stop = False
def listen():
    while not stop:
        try:
            d = N.nvmlEventSetWait(es, 500)
        except N.NVMLError as e:
            if "Timeout" in type(e).__name__ or getattr(e, "value", None) == 10:
                continue
            print(json.dumps({"wait_error": repr(e)}), flush=True)
            continue
        print(json.dumps({"t": time.time(), "eventType": d.eventType, "eventData": d.eventData,
                          "gpuInstanceId": d.gpuInstanceId, "computeInstanceId": d.computeInstanceId}), flush=True)
t = threading.Thread(target=listen, daemon=True)
t.start()
for cmd in sys.argv[1:]:
    r = subprocess.run(cmd, shell=True, capture_output=True, text=True)
    print(json.dumps({"cmd": cmd, "rc": r.returncode, "stdout": r.stdout[-500:], "stderr": r.stderr[-500:]}), flush=True)
    time.sleep(1.5)
stop = True
t.join(2)
N.nvmlEventSetFree(es)
