// The baseline of the REST benchmarks: a bare uWebSockets.js server that answers from memory,
// with no routing, auth, validation, metrics or database. Run as its own process so that it
// gets a core like the service does:
//   node dist/bench/lib/bare-server.js <file.json>
// where the file maps request paths (with the query string, if any) to the JSON text to answer
// (`*` answers any other path).
// It prints `listening <port>` once ready.
import fs from 'node:fs';
import uWS from 'uWebSockets.js';

export function startBareServer(answers: Map<string, string>, port = 0): Promise<{ port: number; close(): void }> {
  const fallback = answers.get('*');
  const app = uWS.App();
  app.any('/*', (res, req) => {
    const query = req.getQuery();
    const body = answers.get(query ? `${req.getUrl()}?${query}` : req.getUrl()) ?? fallback;
    if (body === undefined) {
      res.writeStatus('404 Not Found').writeHeader('Content-Type', 'application/json').end('{"message":"not found","status":404}');
      return;
    }
    res.writeStatus('200 OK').writeHeader('Content-Type', 'application/json').end(body);
  });
  return new Promise((resolve, reject) => {
    app.listen('127.0.0.1', port, (socket) => {
      if (!socket) return reject(new Error('bare server: cannot listen'));
      resolve({
        port: uWS.us_socket_local_port(socket),
        close: () => uWS.us_listen_socket_close(socket),
      });
    });
  });
}

const isMain = process.argv[1] && import.meta.url.endsWith(process.argv[1].replace(/\\/g, '/'));
if (isMain) {
  const file = process.argv[2];
  if (!file) {
    process.stderr.write('usage: bare-server <answers.json>\n');
    process.exit(2);
  }
  const answers = new Map(Object.entries(JSON.parse(fs.readFileSync(file, 'utf8')) as Record<string, string>));
  const { port } = await startBareServer(answers);
  process.stdout.write(`listening ${port}\n`);
}
