import sys

from fairq.cli import main

sys.exit(main())
