# Echo service: every datagram to service 7 goes back to its sender's
# service, the same bytes, with an end-to-end ack.
#
# Runs unchanged on a board and on the unix port, beside the node:
#   board:     copy it (mpremote cp firmware/examples/echo.py :echo.py); /config.json
#              {"app": "echo", "app_config": {"service": 7}}
#   unix port: snakemesh node --app firmware/examples/echo.py
# Try it from the host:  snakemesh send KEY hello --service 7 --port P1
# while `snakemesh recv --port P1` shows the answer coming back.
# The API: snake/runtime/app.py; the guide: docs/guides/DATAGRAMS.md.
SERVICE = 7


async def main(mesh, conf):
    service = conf.get("service", SERVICE)
    while True:
        src, src_service, data = await mesh.recv(service)
        # the reply goes to the service the sender said it came from
        h = mesh.send(src, data, service=src_service, ack=True, src_service=service)
        await h
