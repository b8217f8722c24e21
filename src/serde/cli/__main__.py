import sys

from serde.cli import main

sys.exit(main())
