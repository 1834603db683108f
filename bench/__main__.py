from bench._cli import main

main()
