import sys

try:
    from .driver import main
except ImportError as e:  # numpy, most likely: an interpreter other than scripts/setup.sh's .venv
    print("oracle: error: %s cannot run the oracle: %s" % (sys.executable, e), file=sys.stderr)
    sys.exit(2)

sys.exit(main())
