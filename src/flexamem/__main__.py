from flexamem.cli import main

raise SystemExit(main())
