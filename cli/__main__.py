from destiny.cli.main import main

main()
