from tokendp.cli import main

main()
