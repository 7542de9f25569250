"""``python -m webhook.cli``: the same as the ``gpu-policy`` console script."""

import sys

from webhook.cli.main import main

sys.exit(main())
