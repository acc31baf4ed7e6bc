from cairn_cli.cli import main

main()
