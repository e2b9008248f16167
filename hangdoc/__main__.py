import sys

from hangdoc.cli import main

sys.exit(main())
