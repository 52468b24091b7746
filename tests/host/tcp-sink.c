// SPDX-License-Identifier: MIT
/*
 * tcp-sink ADDR PORTFILE OUTFILE: listen on ADDR (IPv4 or IPv6 literal) at
 * an ephemeral port, write the port to PORTFILE, accept one connection,
 * copy what it receives to OUTFILE until EOF.  A helper for tool.sh.
 */
#include <netdb.h>

#include "common.h"

int main(int argc, char **argv)
{
	struct addrinfo hints = {
		.ai_flags = AI_NUMERICHOST | AI_PASSIVE,
		.ai_socktype = SOCK_STREAM,
	};
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	struct addrinfo *ai;
	char buf[65536], port[16];
	int l, c, out, tmp;
	ssize_t n;

	if (argc != 4) {
		fprintf(stderr, "usage: tcp-sink ADDR PORTFILE OUTFILE\n");
		return 2;
	}
	if (getaddrinfo(argv[1], "0", &hints, &ai)) {
		fprintf(stderr, "tcp-sink: bad address %s\n", argv[1]);
		return 1;
	}
	l = socket(ai->ai_family, SOCK_STREAM, 0);
	if (l < 0 || bind(l, ai->ai_addr, ai->ai_addrlen) || listen(l, 1) ||
	    getsockname(l, (struct sockaddr *)&ss, &len))
		DIE("listen on %s", argv[1]);
	freeaddrinfo(ai);
	if (getnameinfo((struct sockaddr *)&ss, len, NULL, 0, port,
			sizeof(port), NI_NUMERICSERV))
		DIE("getnameinfo");

	/* Write the port atomically: the script polls for the file. */
	snprintf(buf, sizeof(buf), "%s.tmp", argv[2]);
	tmp = open(buf, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (tmp < 0 || dprintf(tmp, "%s\n", port) < 0 || close(tmp) ||
	    rename(buf, argv[2]))
		DIE("port file");

	c = accept(l, NULL, NULL);
	if (c < 0)
		DIE("accept");
	out = open(argv[3], O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (out < 0)
		DIE("%s", argv[3]);
	while ((n = read(c, buf, sizeof(buf))) > 0)
		if (write(out, buf, n) != n)
			DIE("write");
	if (n < 0)
		DIE("read");
	close(out);
	close(c);
	close(l);
	return 0;
}
