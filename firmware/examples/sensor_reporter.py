# Sensor reporter: every N seconds, send a reading to a configured key with
# an end-to-end ack, and count how many were delivered and failed.
#
# Runs unchanged on a board and on the unix port, beside the node:
#   board:     mpremote cp firmware/examples/sensor_reporter.py :sensor_reporter.py;
#              /config.json {"app": "sensor_reporter",
#                            "app_config": {"to": "<64 hex digits>", "every_s": 10, "service": 20}}
#   unix port: snakemesh node --app firmware/examples/sensor_reporter.py --config C.json
# The reading is a line "SEQ VALUE": the board's internal temperature
# sensor where the port has one (esp32.raw_temperature), else the uptime in
# seconds. Read them on the collector: snakemesh recv --service 20 --port P.
# The API: snake/runtime/app.py; the guide: docs/guides/DATAGRAMS.md.
import asyncio
import binascii

SERVICE = 20

delivered = 0
failed = 0
last_reason = None


def reading():
    try:
        import esp32
        return esp32.raw_temperature()
    except (ImportError, AttributeError):
        import time
        return time.time()


async def main(mesh, conf):
    global delivered, failed, last_reason
    to = binascii.unhexlify(conf["to"])
    every = conf.get("every_s", 10)
    service = conf.get("service", SERVICE)
    seq = 0
    while True:
        seq += 1
        h = mesh.send(to, "%d %s" % (seq, reading()), service=service, ack=True)
        state = await h
        if state == "delivered":
            delivered += 1
        else:
            failed += 1
            last_reason = h.reason
        await asyncio.sleep(every)
