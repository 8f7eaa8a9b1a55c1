from intertwine.cli import main

main()
