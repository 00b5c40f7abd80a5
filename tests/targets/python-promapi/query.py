"""Asks a server an instant query with prometheus-api-client (PyPI), as users' scripts do.

Usage: query.py URL TIME QUERY -- prints the result of `custom_query` as JSON: a Prometheus
vector, `[{"metric": {...}, "value": [t, "v"]}, ...]`. Exits non-zero with the client's error
when the server answers anything else.
"""

import json
import sys

from prometheus_api_client import PrometheusConnect


def main() -> None:
    url, time, query = sys.argv[1:4]
    prom = PrometheusConnect(url=url, disable_ssl=True)
    result = prom.custom_query(query=query, params={"time": time})
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
