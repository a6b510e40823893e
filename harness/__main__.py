from harness.main import main

raise SystemExit(main())
