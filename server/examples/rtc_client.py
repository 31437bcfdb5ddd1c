"""A robot loop with real-time chunking against pi0-server, with openpi-client (pip install openpi-client).
The server keeps this connection's last chunk; each request says how many of its actions were executed and how
many more will run while the next chunk is computed (server/README.md, "Real-time chunking").
Usage: python3 rtc_client.py HOST PORT [exact|lerobot]  (a LIBERO-shaped robot with random observations, for
illustration; the guidance's form, default LeRobot's)."""
import sys

import numpy as np
from openpi_client import websocket_client_policy

policy = websocket_client_policy.WebsocketClientPolicy(sys.argv[1], int(sys.argv[2]))
rng = np.random.default_rng(0)
mode = sys.argv[3] if len(sys.argv) > 3 else "lerobot"
executed, delay = 0, 2  # actions of the last chunk executed since it arrived; expected inference delay in actions
for step in range(5):
    obs = {"observation/image": rng.integers(0, 256, (224, 224, 3), dtype=np.uint8),
           "observation/wrist_image": rng.integers(0, 256, (224, 224, 3), dtype=np.uint8),
           "observation/state": rng.standard_normal(8), "prompt": "pick up the black bowl"}
    chunk = policy.infer({**obs, "rtc": {"executed": executed, "inference_delay": delay, "mode": mode}})["actions"]
    executed = 5  # the robot runs 5 actions of this chunk before asking again
    print(step, chunk.shape, chunk[0, :3])
