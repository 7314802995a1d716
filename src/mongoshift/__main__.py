from mongoshift.cli.main import main

main()
