import { randomBytes, timingSafeEqual } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { CallToolRequestSchema, ListToolsRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import type { ToolDispatch } from './contracts.js';
import type { DriverTool } from './driver-wire.js';

/**
 * The capsule's tools offered to a harness as an MCP server (streamable HTTP, stateless) on the
 * sandbox's loopback. It is a door into the same dispatch a driver's tool calls take — the
 * allowlist, the grants, the trace and the hooks all apply — and it is the harness's only way to
 * the capsule's tools: the harness runs with its own built-in tools off.
 *
 * Every request must carry the bearer token minted for this session. Outside a sealed sandbox the
 * loopback is the machine's, and another local process that found the port must not be able to
 * call a capsule's tools.
 */

/** The server's key in the harness's MCP configuration: its tools are named `mcp__murmur__<tool>`. */
export const TOOL_SERVER_NAME = 'murmur';

export interface ToolServerHandler {
  tools(): DriverTool[];
  call(name: string, input: string): Promise<ToolDispatch>;
}

export class ToolServer {
  private constructor(
    private readonly server: http.Server,
    readonly url: string,
    private readonly token: string,
  ) {}

  static async start(handler: ToolServerHandler): Promise<ToolServer> {
    const token = randomBytes(32).toString('base64url');
    const expected = Buffer.from(`Bearer ${token}`);
    const server = http.createServer((request, response) => {
      const given = Buffer.from(request.headers.authorization ?? '');
      if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
        response.writeHead(401, { 'content-type': 'application/json' }).end('{"error":"this MCP server answers only the harness it was started for"}');
        return;
      }
      if (request.method !== 'POST') {
        // Stateless: no server-initiated stream to open, no session to end.
        response.writeHead(405, { allow: 'POST' }).end();
        return;
      }
      void serveOne(handler, request, response);
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', resolve);
    });
    const { port } = server.address() as AddressInfo;
    return new ToolServer(server, `http://127.0.0.1:${port}/mcp`, token);
  }

  /** The harness's `--mcp-config`: this server alone, with its token. */
  config(): string {
    return JSON.stringify({ mcpServers: { [TOOL_SERVER_NAME]: { type: 'http', url: this.url, headers: { Authorization: `Bearer ${this.token}` } } } });
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

/** One JSON-RPC exchange: a fresh MCP server and transport per request, as the SDK's stateless mode wants. */
async function serveOne(handler: ToolServerHandler, request: http.IncomingMessage, response: http.ServerResponse): Promise<void> {
  const mcp = new Server({ name: 'murmur-capsule-tools', version: '0.1.0' }, { capabilities: { tools: {} } });
  mcp.setRequestHandler(ListToolsRequestSchema, () => ({
    tools: handler.tools().map((tool) => ({
      name: tool.name,
      description: tool.description ?? tool.name,
      inputSchema: { ...tool.parameters, type: 'object' as const },
    })),
  }));
  mcp.setRequestHandler(CallToolRequestSchema, async (call) => {
    const dispatched = await handler.call(call.params.name, JSON.stringify(call.params.arguments ?? {}));
    return { content: [{ type: 'text' as const, text: dispatched.text }], isError: dispatched.isError };
  });
  const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
  response.on('close', () => {
    void transport.close();
    void mcp.close();
  });
  try {
    await mcp.connect(transport);
    await transport.handleRequest(request, response);
  } catch (error) {
    if (!response.headersSent) response.writeHead(500, { 'content-type': 'application/json' });
    response.end(JSON.stringify({ error: error instanceof Error ? error.message : String(error) }));
  }
}
