from cairn_cli.entry import main

main()
