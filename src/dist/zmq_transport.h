// The ZeroMQ transport (dist/transport.h): the coordinator binds a ROUTER
// socket as a CURVE server, each worker connects a DEALER socket as a CURVE
// client; both with the cluster key (dist/curve_key.h). Every frame after
// the handshake is encrypted and authenticated (Curve25519 + XSalsa20-
// Poly1305, libsodium); the coordinator's ZAP handler admits only clients
// whose public key is the cluster's and logs every refusal with the peer's
// address. ZeroMQ reconnects a worker whose coordinator restarts; ZMTP
// heartbeats close a connection whose link went silent. Messages longer than
// `piece_bytes` travel in pieces (dist/pieces.h), each one a sign of life.
#pragma once

#include <memory>
#include <string>

#include "dist/curve_key.h"
#include "dist/pieces.h"
#include "dist/transport.h"

namespace ds4::dist {

// "HOST:PORT" -> "tcp://HOST:PORT" (port 0: any free one); an endpoint
// with a scheme is kept. ds4::Error when there is no port.
std::string zmq_endpoint(const std::string& host_port);

// Binds `endpoint` (tcp://HOST:PORT). ds4::Error naming the endpoint when
// it cannot (in use, bad address).
std::unique_ptr<Hub> make_zmq_hub(const std::string& endpoint, const CurveKey& key,
                                  size_t piece_bytes = kDefaultPieceBytes);

// Connects to `endpoint` (ZeroMQ keeps retrying in the background). With a
// `forward_listen` endpoint (tcp://HOST:PORT, "*" for any interface or
// port) it also binds there for other workers' hand-overs (Link::
// forward_address); ds4::Error naming the endpoint when it cannot.
std::unique_ptr<Link> make_zmq_link(const std::string& endpoint, const CurveKey& key,
                                    const std::string& forward_listen = "", size_t piece_bytes = kDefaultPieceBytes);

}  // namespace ds4::dist
