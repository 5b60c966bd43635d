"""§20.5.2 Spot-instance training that survives preemption: ``chapter20.demos.spot_run``.

    python chapter20/scripts/spot_demo.py --output-dir runs/spot          # one process
    torchrun --standalone --nproc_per_node=2 --max-restarts=5 \\
        chapter20/scripts/spot_demo.py --output-dir runs/spot --chaos-kills 3   # 2 ranks

``--help`` lists the options; the module's docstring says what the run does.
"""

import sys

from chapter20.demos.spot_run import main

if __name__ == "__main__":
    main(sys.argv[1:])
