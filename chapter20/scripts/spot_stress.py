"""§20.5.2 Stress test of bitwise resume: ``chapter20.demos.resume_stress``.

    python chapter20/scripts/spot_stress.py --repetitions 20            # the issue-24 procedure
    python chapter20/scripts/spot_stress.py --repetitions 3 --steps 24 --kills 2 --kill-seed 7

``--help`` lists the options; the module's docstring says what the test does.
"""

import sys

from chapter20.demos.resume_stress import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
