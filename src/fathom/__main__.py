from fathom.cli import main

raise SystemExit(main())
