from destiny.cli.entry import destiny

destiny()
