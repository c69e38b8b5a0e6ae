import sys

from relay_api.cli import main

sys.exit(main())
