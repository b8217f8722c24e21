import sys

from serde.cli.app import main

sys.exit(main())
