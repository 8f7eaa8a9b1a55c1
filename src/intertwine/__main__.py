from intertwine.workflow.cli import main

main()
