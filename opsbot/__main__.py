from opsbot.cli import app

app()
