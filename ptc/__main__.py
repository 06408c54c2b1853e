import sys

from ptc.cli import main

sys.exit(main())
