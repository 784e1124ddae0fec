#!/bin/sh
# One Spark role in the foreground, its logs on standard error (docker logs):
#
#   master                 the standalone master, on 7077
#   worker                 a worker of SPARK_MASTER_URL, offering SPARK_WORKER_CORES cores
#                          and SPARK_WORKER_MEMORY to executors
#   connect [ARGS...]      the Spark Connect server on 15002, whose driver runs the jobs on
#                          SPARK_MASTER_URL's workers; ARGS are spark-submit options
#                          (--conf k=v ...)
#   probe PORT             exit 0 when this container's address accepts a connection on
#                          PORT (the health checks)
#   anything else          run as given (a shell, `spark-submit --version`)
#
# Every role advertises this container's address rather than its host name (the
# container id, which the other containers do not all resolve): the master, the
# executors and the Connect server's driver reach each other by address.
set -eu

role=${1:-connect}
[ $# -gt 0 ] && shift
address=$(hostname -i | cut -d' ' -f1)
if [ "$role" = probe ]; then
  exec python3 -c 'import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), 3).close()' \
    "$address" "$1"
fi
mkdir -p "$SPARK_LOG_DIR" "$SPARK_PID_DIR" "$SPARK_LOCAL_DIRS" "$SPARK_WORKER_DIR"
master=${SPARK_MASTER_URL:-spark://spark-master:7077}

case "$role" in
  master)
    # No REST submission server (port 6066): applications come only from the Connect
    # server, through 7077.
    export SPARK_MASTER_OPTS="${SPARK_MASTER_OPTS:-} -Dspark.master.rest.enabled=false"
    exec spark-class org.apache.spark.deploy.master.Master \
      --host "${SPARK_MASTER_HOST:-$address}" --port 7077 --webui-port 8080 "$@"
    ;;
  worker)
    exec spark-class org.apache.spark.deploy.worker.Worker \
      --host "$address" --port 7078 --webui-port 8081 \
      --cores "${SPARK_WORKER_CORES:-1}" --memory "${SPARK_WORKER_MEMORY:-1g}" \
      --work-dir "$SPARK_WORKER_DIR" "$master" "$@"
    ;;
  connect)
    # The driver listens on fixed ports at this container's address (the executors call
    # it back there); spark-submit runs the server class with no application jar.
    exec spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer \
      --name "Spark Connect server" --master "$master" \
      --driver-memory "${SPARK_DRIVER_MEMORY:-1g}" \
      --conf spark.driver.host="$address" \
      --conf spark.driver.bindAddress=0.0.0.0 \
      --conf spark.driver.port=7079 \
      --conf spark.blockManager.port=7080 \
      --conf spark.connect.grpc.binding.port=15002 \
      --conf spark.ui.enabled=false \
      "$@"
    ;;
  *)
    exec "$role" "$@"
    ;;
esac
