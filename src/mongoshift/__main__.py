from mongoshift.cli.launch import main

main()
