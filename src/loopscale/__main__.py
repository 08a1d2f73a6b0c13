import sys

from loopscale.cli import main

sys.exit(main())
