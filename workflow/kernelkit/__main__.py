from kernelkit.cli import main

raise SystemExit(main())
