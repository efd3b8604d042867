from ckptdoctor.cli import main

main()
