import sys

from gregor.cli.main import main

sys.exit(main())
