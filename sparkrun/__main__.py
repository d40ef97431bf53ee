from sparkrun.cli.main import main

main()
